"""URLs: the webhook and probes at the root, operators' pages under /admin/, /dashboard/ and /api/.

INJECTOR_ROLE (injector_site/platform/roles.py) decides which of them this process serves: a webhook process never
loads the operators' views, an operator process never answers /mutate.
"""

from django.conf import settings
from django.contrib import admin
from django.contrib.auth.decorators import login_required
from django.urls import include, path, reverse_lazy
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.permissions import IsAuthenticated
from rest_framework.routers import APIRootView

from injector_site.platform.roles import role_serves_mutate, role_serves_operators
from mutations.webhook import views as webhook_views

# The admin's "View site" opens the operators' dashboard, as does the root (which sends others to log in).
admin.site.site_url = "/dashboard/"  # dashboard:overview (the URLconf is not loaded yet to reverse it)


class ApiRoot(APIRootView):
    """The API's endpoints, each with its address (GET /api/v1/): the two routers below leave out their roots."""

    api_root_dict = {
        "presets": "preset-list", "gpu-models": "gpu-model-list", "namespace-policies": "namespace-policy-list",
        "models": "language-model-list", "changes": "change-list", "gpu-nodes": "gpu-node-list",
        "preview": "pod-preview", "impact": "impact", "audit": "audit-list",
    }


probes = [
    path("healthz", webhook_views.healthz, name="healthz"),
    path("readyz", webhook_views.readyz, name="readyz"),
    path("metrics", webhook_views.metrics, name="metrics"),
]
webhook = [path("mutate", webhook_views.mutate, name="mutate")]
operators = [
    path("", RedirectView.as_view(url=reverse_lazy("dashboard:overview"), permanent=False), name="home"),
    path("admin/", admin.site.urls),
    path("api/v1/", ApiRoot.as_view(), name="api-root"),
    path("api/v1/", include("profiles.api.urls")),
    path("api/v1/", include("mutations.api.urls")),
    # The schema and its docs describe the API, which needs a login: so do they (a token or a session).
    path("api/schema/", SpectacularAPIView.as_view(permission_classes=[IsAuthenticated]), name="schema"),
    # The split view serves Swagger UI's start script as a file of its own: no inline script (CSP).
    path("api/docs/", login_required(SpectacularSwaggerSplitView.as_view(url_name="schema")), name="api-docs"),
    path("dashboard/", include("mutations.dashboard.urls")),
]

urlpatterns = [
    *(webhook if role_serves_mutate(role=settings.INJECTOR_ROLE) else []),
    *probes,
    *(operators if role_serves_operators(role=settings.INJECTOR_ROLE) else []),
]
