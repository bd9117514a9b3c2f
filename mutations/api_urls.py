"""Read-only REST API for the admission audit (mounted at /api/v1/)."""

urlpatterns: list = []
