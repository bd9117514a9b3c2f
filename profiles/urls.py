"""REST API for presets, GPU models, namespace policies and previews (mounted at /api/v1/)."""

urlpatterns: list = []
