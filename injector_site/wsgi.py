"""The WSGI application gunicorn serves: Django, with POST /mutate answered ahead of it.

/mutate is on the path of every Pod creation in the cluster. Django's handler, its middleware and
signals are for the operators' pages (sessions, CSRF, static files, per-view metrics) and do nothing
for an AdmissionReview, so `POST /mutate` goes straight to `mutations.webhook.views.mutate_answer`, the same
function Django's `mutate` view calls (which the test client and any other method reach).
"""

from __future__ import annotations

import os
import threading
import time
from http import HTTPStatus

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "injector_site.settings")

django_application = get_wsgi_application()

from django.conf import settings  # noqa: E402  (after Django is set up)
from django.db import close_old_connections, connections  # noqa: E402  (after Django is set up)

from injector_site.platform.roles import role_serves_mutate  # noqa: E402  (after setup, as the webhook's)
from mutations.webhook.views import JSON_HEADERS, MUTATE_PATH, mutate_answer  # noqa: E402  (imports models: after setup)

# When this thread last tidied its database connections (_connections_tidy).
_tidied = threading.local()
TIDY_SECONDS = 1.0


def _connections_tidy() -> None:
    """What Django's request_finished signal does, at most once a second per thread.

    The first admission in a process reads the configuration through this thread's connection (the
    configuration's later reads are the refresh thread's own); keep it only as long as CONN_MAX_AGE (minutes)
    and the health check say. Never inside a transaction (the tests' own). Once a second, not per admission:
    the check looks up the thread's connections through Django's ConnectionHandler and the settings, about
    70,000 instructions (docs/benchmarks.md, "Instructions per admission"), and the admissions between two
    checks do not use the connection.
    """
    now = time.monotonic()
    if now < getattr(_tidied, "until", 0.0):
        return
    _tidied.until = now + TIDY_SECONDS
    db = connections["default"]
    if db.connection is not None and not db.in_atomic_block:
        close_old_connections()


_STATUS_LINES = {s.value: f"{s.value} {s.phrase}" for s in HTTPStatus}
# An operator process (INJECTOR_ROLE=operator) leaves /mutate to Django, which answers it with a 404.
_SERVES_MUTATE = role_serves_mutate(role=settings.INJECTOR_ROLE)


def application(environ, start_response):
    if not _SERVES_MUTATE or environ.get("PATH_INFO") != MUTATE_PATH or environ.get("REQUEST_METHOD") != "POST":
        return django_application(environ, start_response)
    try:
        status_code, body = mutate_answer(content_type=environ.get("CONTENT_TYPE", ""),
                                          content_length=environ.get("CONTENT_LENGTH"),
                                          read=environ["wsgi.input"].read, environ=environ)
    finally:
        _connections_tidy()
    start_response(_STATUS_LINES[status_code], [*JSON_HEADERS, ("Content-Length", str(len(body)))])
    return [body]
