"""Keep the webhook port to the webhook: operators' pages are served only on the UI port."""

from django.conf import settings
from django.http import HttpResponseNotFound

# What the API server, the kubelet and Prometheus need on the webhook port.
WEBHOOK_PATHS = frozenset({"/mutate", "/healthz", "/readyz", "/metrics"})


class WebhookPortMiddleware:
    """On a port listed in INJECTOR_WEBHOOK_ONLY_PORTS, answer only the webhook's own paths.

    The NetworkPolicy opens the webhook port to the API server (from anywhere, since its
    address is not known in every cluster) and the UI port only to chosen clients; without
    this, /admin/ would be reachable through the webhook port and the policy would mean nothing.
    The port is the listening socket's (gunicorn passes it), never the client's Host header.
    """

    def __init__(self, get_response):
        self.get_response = get_response
        self.ports = frozenset(settings.INJECTOR_WEBHOOK_ONLY_PORTS)

    def __call__(self, request):
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
