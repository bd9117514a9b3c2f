"""The change-log context of each admin and API request (profiles.changes): through what, which request."""

from __future__ import annotations

import re

from injector_site.platform.middleware import WEBHOOK_PATHS

from .context import change_context, request_id_new

# A caller's X-Request-Id is kept when it looks like an id (a proxy's or a script's); anything else is replaced.
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")


def _through(path: str) -> str:
    if path.startswith("/admin/"):
        return "admin"
    if path.startswith("/api/"):
        return "api"
    return "system"


class ChangeContextMiddleware:
    """Sets the change-log context for the request; the user is read when a change is written (after DRF's
    token authentication, which runs in the view)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path_info in WEBHOOK_PATHS:
            # The webhook's paths change no configuration; /mutate spends no time here.
            return self.get_response(request)
        given = request.META.get("HTTP_X_REQUEST_ID", "")
        request_id = given if _REQUEST_ID.match(given) else request_id_new()
        with change_context(through=_through(request.path_info), request_id=request_id, request=request):
            return self.get_response(request)
