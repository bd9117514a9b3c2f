"""URLs: the webhook and probes at the root, operators' pages under /admin/, /dashboard/ and /api/."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from mutations import views as mutation_views

urlpatterns = [
    path("mutate", mutation_views.mutate, name="mutate"),
    path("healthz", mutation_views.healthz, name="healthz"),
    path("readyz", mutation_views.readyz, name="readyz"),
    path("metrics", mutation_views.metrics, name="metrics"),
    path("admin/", admin.site.urls),
    path("api/v1/", include("profiles.urls")),
    path("api/v1/", include("mutations.api_urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("dashboard/", include("mutations.dashboard_urls")),
]
