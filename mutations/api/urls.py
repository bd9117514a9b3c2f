"""REST API for the admission audit, read-only, and the impact of a draft configuration (mounted at /api/v1/)."""

from django.urls import path
from rest_framework.routers import DefaultRouter

from . import impact, recommendations, views

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("audit", views.AdmissionAuditViewSet, basename="audit")
router.register("recommendations", recommendations.RecommendationViewSet, basename="recommendations")

urlpatterns = [path("impact/", impact.ImpactView.as_view(), name="impact"), *router.urls]
