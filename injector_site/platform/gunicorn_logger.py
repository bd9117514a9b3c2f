"""gunicorn's logger, except that a switched-off access log costs nothing."""

from __future__ import annotations

import logging

from gunicorn import glogging


class AccessLogWhenEnabled(glogging.Logger):
    """gunicorn's logger, checking the access log's level before it builds a line.

    With logconfig_dict set, gunicorn builds every request's access-log atoms (a dict of some 30
    fields) before the "gunicorn.access" logger drops the line at level CRITICAL, a visible share of a
    worker's time under scripts/bench (py-spy: docs/benchmarks.md). Checking the level first skips that work.
    """

    def access(self, resp, req, environ, request_time):
        if self.access_log.isEnabledFor(logging.INFO):
            super().access(resp, req, environ, request_time)
