"""injector_site/platform/logging.py: the one JSON log schema, for the app's lines and gunicorn's."""

import io
import json
import logging
import re
import sys
from pathlib import Path

import pytest

from injector_site.platform.logging import JsonFormatter, fields_log

TIME_FORMAT = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


def formatted(message="hello %s", args=("world",), **attributes) -> dict:
    record = logging.LogRecord("volcano_injector.test", logging.WARNING, __file__, 1, message, args, None)
    record.__dict__.update(attributes)
    line = JsonFormatter().format(record)
    assert "\n" not in line
    return json.loads(line)


def test_a_line_has_utc_time_with_milliseconds_level_logger_message_and_pid():
    entry = formatted(created=0.5)
    assert entry == {"time": "1970-01-01T00:00:00.500Z", "level": "WARNING", "logger": "volcano_injector.test",
                     "message": "hello world", "pid": entry["pid"]}
    assert isinstance(entry["pid"], int)
    assert re.fullmatch(TIME_FORMAT, formatted()["time"])


def test_extra_fields_are_kept_and_values_json_cannot_hold_become_strings():
    entry = formatted(request_uid="abc", patch=[{"op": "add"}], path=Path("/x"))
    assert entry["request_uid"] == "abc" and entry["patch"] == [{"op": "add"}] and entry["path"] == "/x"


def test_an_exception_is_one_field_with_its_traceback():
    try:
        raise ValueError("broken")
    except ValueError:
        exc_info = sys.exc_info()
    entry = formatted(exc_info=exc_info)
    assert entry["exception"].startswith("Traceback") and "ValueError: broken" in entry["exception"]


def test_a_line_is_ascii_so_a_lone_surrogate_from_a_request_cannot_break_the_stream():
    line = JsonFormatter().format(logging.makeLogRecord({"msg": "pod \ud800 é", "pod_name": "\udcff"}))
    line.encode("ascii")
    assert json.loads(line)["message"] == "pod \ud800 é"


def _json_logger(name: str, stream) -> logging.Logger:
    logger = logging.getLogger(name)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger.handlers, logger.propagate, logger.level = [handler], False, logging.INFO
    return logger


FIELDS = {"request_uid": "abc", "namespace": "team-a", "pod": "web-0", "preset": None, "dry_run": False,
          "duration_ms": 0.25, "reason": "pod \ud800 é"}


def test_fields_log_writes_the_line_logger_log_writes(monkeypatch):
    monkeypatch.setattr("time.time", lambda: 1764900000.5)
    direct, logged = io.StringIO(), io.StringIO()
    fields_log(_json_logger("volcano_injector.test_direct", direct), logging.INFO, "admission", dict(FIELDS))
    _json_logger("volcano_injector.test_logged", logged).info("admission", extra=dict(FIELDS))
    assert direct.getvalue().replace("test_direct", "test_logged") == logged.getvalue()
    assert direct.getvalue().endswith("}\n") and direct.getvalue().count("\n") == 1


def test_fields_log_makes_a_record_for_a_filter_another_handler_or_a_reserved_name():
    stream = io.StringIO()
    logger = _json_logger("volcano_injector.test_filtered", stream)
    seen = []
    logger.addFilter(lambda record: seen.append(record) or True)
    fields_log(logger, logging.INFO, "admission", dict(FIELDS))
    assert len(seen) == 1 and json.loads(stream.getvalue())["pod"] == "web-0"
    fields_log(logger, logging.DEBUG, "admission", dict(FIELDS))
    assert len(seen) == 1, "below the level nothing is made"
    with pytest.raises(KeyError):  # as logger.info(..., extra={"message": ...}) refuses it
        fields_log(_json_logger("volcano_injector.test_reserved", stream), logging.INFO, "admission",
                   {"message": "x"})
