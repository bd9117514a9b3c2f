"""injector_site/platform/gunicorn_logger.py: a switched-off access log builds no lines."""

import logging

import pytest
from gunicorn import glogging

from injector_site.platform.gunicorn_logger import AccessLogWhenEnabled


@pytest.fixture
def built(monkeypatch) -> list:
    """Requests for which gunicorn's own access() ran (it builds the line's atoms, then logs it)."""
    calls = []
    monkeypatch.setattr(glogging.Logger, "access", lambda self, resp, req, environ, request_time: calls.append(req))
    return calls


def logger_with_access_level(level: int) -> AccessLogWhenEnabled:
    # Not through __init__: gunicorn's setup would reconfigure this process's logging.
    logger = AccessLogWhenEnabled.__new__(AccessLogWhenEnabled)
    logger.access_log = logging.Logger("gunicorn.access.test", level)  # noqa: LOG001 - unregistered: its level stays here
    return logger


def test_with_the_access_logger_at_critical_no_line_is_built(built):
    logger_with_access_level(logging.CRITICAL).access(None, "request", {}, 0.001)
    assert built == []


def test_with_the_access_logger_at_info_gunicorn_writes_the_line(built):
    logger_with_access_level(logging.INFO).access(None, "request", {}, 0.001)
    assert built == ["request"]
