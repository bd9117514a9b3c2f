"""URLs: the webhook and probes at the root, operators' pages under /admin/ and /api/."""

from django.contrib import admin
from django.urls import path

from mutations import views as mutation_views

urlpatterns = [
    path("mutate", mutation_views.MutateView.as_view(), name="mutate"),
    path("healthz", mutation_views.healthz, name="healthz"),
    path("readyz", mutation_views.readyz, name="readyz"),
    path("metrics", mutation_views.metrics, name="metrics"),
    path("admin/", admin.site.urls),
]
