"""REST API for presets, GPU models, namespace policies, the model catalog, their change log and previews
(mounted at /api/v1/)."""

from django.urls import path
from rest_framework.routers import DefaultRouter

from . import changes, inventory, language_models, oversubscription, views

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("presets", views.PresetViewSet, basename="preset")
router.register("gpu-models", views.GpuModelViewSet, basename="gpu-model")
router.register("namespace-policies", views.NamespacePolicyViewSet, basename="namespace-policy")
router.register("models", language_models.LanguageModelViewSet, basename="language-model")
router.register("changes", changes.ObjectChangeViewSet, basename="change")
router.register("gpu-nodes", inventory.GpuNodeViewSet, basename="gpu-node")
router.register("oversubscription-policies", oversubscription.OversubscriptionPolicyViewSet,
                basename="oversubscription-policy")

urlpatterns = [
    path("preview/", views.PodPreviewView.as_view(), name="pod-preview"),
    *router.urls,
]
