"""Middleware: a process serves its role's paths, the webhook port only the webhook; /mutate skips the
generic request metrics."""

from django.conf import settings
from django.http import HttpResponseNotFound
from django_prometheus import middleware as django_prometheus_middleware

from .roles import NOT_SERVED, WEBHOOK_PATHS, role_serves


class WebhookPortMiddleware:
    """Answer only the paths of this process's INJECTOR_ROLE (injector_site/platform/roles.py), and on a port listed
    in INJECTOR_WEBHOOK_ONLY_PORTS only the webhook's own paths.

    The role's URLconf has no other routes; this answers them with a 404 that names the Service that does
    serve them, and covers the URLconf's tests, which load every route once (INJECTOR_ROLE=all).

    The NetworkPolicy opens the webhook port to the API server (from anywhere, since its
    address is not known in every cluster) and the UI port only to chosen clients; without
    this, /admin/ would be reachable through the webhook port and the policy would mean nothing.
    The port is the listening socket's (gunicorn passes it), never the client's Host header.
    """

    def __init__(self, get_response):
        self.get_response = get_response
        self.ports = frozenset(settings.INJECTOR_WEBHOOK_ONLY_PORTS)

    def __call__(self, request):
        role = settings.INJECTOR_ROLE
        if not role_serves(role=role, path=request.path):
            return HttpResponseNotFound(NOT_SERVED[role], content_type="text/plain")
        if self.ports and request.path not in WEBHOOK_PATHS and self._local_port(request) in self.ports:
            return HttpResponseNotFound(
                "Not found on the webhook port: the admin, dashboard and API are served on the UI port "
                "(Service volcano-injector-ui).\n",
                content_type="text/plain",
            )
        return self.get_response(request)

    @staticmethod
    def _local_port(request) -> int | None:
        sock = request.META.get("gunicorn.socket")
        try:
            return sock.getsockname()[1] if sock is not None else None
        except (OSError, IndexError, TypeError):
            return None


class PrometheusBeforeMiddleware(django_prometheus_middleware.PrometheusBeforeMiddleware):
    """django-prometheus' request metrics, except for /mutate, which has its own.

    /mutate is the hot path (every Pod creation in the cluster) and already counts its answers
    and latency in volcano_injector_admissions_total / _admission_duration_seconds; the generic
    per-view metrics cost about a sixth of its CPU time and would say the same thing again.
    """

    def process_request(self, request):
        if request.path_info != "/mutate":
            super().process_request(request)

    def process_response(self, request, response):
        if request.path_info == "/mutate":
            return response
        return super().process_response(request, response)


class PrometheusAfterMiddleware(django_prometheus_middleware.PrometheusAfterMiddleware):
    """django-prometheus' per-view metrics, except for /mutate (see PrometheusBeforeMiddleware)."""

    def process_request(self, request):
        if request.path_info != "/mutate":
            super().process_request(request)

    def process_view(self, request, view_func, *args, **kwargs):
        if request.path_info != "/mutate":
            super().process_view(request, view_func, *args, **kwargs)

    def process_template_response(self, request, response):
        if request.path_info == "/mutate":
            return response
        return super().process_template_response(request, response)

    def process_response(self, request, response):
        if request.path_info == "/mutate":
            return response
        return super().process_response(request, response)

    def process_exception(self, request, exception):
        if request.path_info != "/mutate":
            super().process_exception(request, exception)
