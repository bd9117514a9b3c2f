"""URLs: the webhook and probes at the root, operators' pages under /admin/, /dashboard/ and /api/."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from mutations.webhook import views as webhook_views

urlpatterns = [
    path("mutate", webhook_views.mutate, name="mutate"),
    path("healthz", webhook_views.healthz, name="healthz"),
    path("readyz", webhook_views.readyz, name="readyz"),
    path("metrics", webhook_views.metrics, name="metrics"),
    path("admin/", admin.site.urls),
    path("api/v1/", include("profiles.urls")),
    path("api/v1/", include("mutations.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("dashboard/", include("mutations.dashboard.urls")),
]
