"""URLs: the webhook and probes at the root, operators' pages under /admin/, /dashboard/ and /api/."""

from django.contrib import admin
from django.contrib.auth.decorators import login_required
from django.urls import include, path, reverse_lazy
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.permissions import IsAuthenticated

from mutations.webhook import views as webhook_views

# The admin's "View site" opens the operators' dashboard, as does the root (which sends others to log in).
admin.site.site_url = "/dashboard/"  # dashboard:overview (the URLconf is not loaded yet to reverse it)

urlpatterns = [
    path("", RedirectView.as_view(url=reverse_lazy("dashboard:overview"), permanent=False), name="home"),
    path("mutate", webhook_views.mutate, name="mutate"),
    path("healthz", webhook_views.healthz, name="healthz"),
    path("readyz", webhook_views.readyz, name="readyz"),
    path("metrics", webhook_views.metrics, name="metrics"),
    path("admin/", admin.site.urls),
    path("api/v1/", include("profiles.api.urls")),
    path("api/v1/", include("mutations.api.urls")),
    # The schema and its docs describe the API, which needs a login: so do they (a token or a session).
    path("api/schema/", SpectacularAPIView.as_view(permission_classes=[IsAuthenticated]), name="schema"),
    # The split view serves Swagger UI's start script as a file of its own: no inline script (CSP).
    path("api/docs/", login_required(SpectacularSwaggerSplitView.as_view(url_name="schema")), name="api-docs"),
    path("dashboard/", include("mutations.dashboard.urls")),
]
