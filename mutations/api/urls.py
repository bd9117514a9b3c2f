"""Read-only REST API for the admission audit (mounted at /api/v1/)."""

from rest_framework.routers import DefaultRouter

from . import views

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("audit", views.AdmissionAuditViewSet, basename="audit")

urlpatterns = router.urls
