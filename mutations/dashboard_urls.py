"""The audit dashboard (mounted at /dashboard/)."""

app_name = "dashboard"
urlpatterns: list = []
