"""JSON log lines on stdout, one object per record, for the cluster's log collector.

The one log schema: the app's loggers (settings.LOGGING) and gunicorn's (gunicorn_conf.logconfig_dict)
both format with JsonFormatter, so every line the container writes has the same fields.

Every admission writes a line, so its cost is on the request path (per admission, counted with
scripts/bench-instructions: docs/benchmarks.md, "Instructions per admission"). Hence orjson, the time
text made once a second, and no record attribute computed that the line does not carry.
"""

import json
import logging
import time
from collections.abc import Iterable
from itertools import islice

import orjson

# The standard library's own switches for attributes a LogRecord fills in on every call (the logging
# HOWTO, "Optimization"): the caller's file, line and function (a walk up the stack), the thread's and
# the multiprocessing process's names. No line this formatter writes carries them; `pid` stays.
logging._srcfile = None  # documented in the HOWTO's "Optimization" table
logging.logThreads = False
logging.logMultiprocessing = False

# Attributes every LogRecord has; anything else was passed with extra= and is emitted as a field.
_STANDARD = tuple(vars(logging.makeLogRecord({})))
_STANDARD_ATTRS = frozenset(_STANDARD) | {"message", "asctime"}
# Tuples of extra= keys that are all extra fields (the same few log calls, again and again), at most 256.
_EXTRA_KEYS_SEEN: set[tuple[str, ...]] = set()


class JsonFormatter(logging.Formatter):
    """Format a record as one JSON object: time, level, logger, message, pid, the extra fields, the exception.

    time is UTC with milliseconds and a Z; pid tells gunicorn's workers (and its master) apart. The line is
    ASCII (non-ASCII characters escaped), so a lone surrogate from a request cannot break the stream.
    """

    # The last second formatted and its text: a webhook writes many lines a second.
    _second: tuple[int, str] = (-1, "")

    def format(self, record: logging.LogRecord) -> str:
        created = record.created
        second = int(created)
        cached_second, second_text = self._second
        if second != cached_second:
            second_text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            JsonFormatter._second = (second, second_text)
        entry: dict[str, object] = {
            "time": f"{second_text}.{int((created - second) * 1000):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        entry.update(_extra_fields(vars(record)))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return _json_ascii(entry)


def _extra_fields(attributes: dict) -> Iterable[tuple[str, object]]:
    """The attributes extra= added to a record: neither a LogRecord's own nor private."""
    # LogRecord.__init__ sets its attributes first, in one order, and extra= adds its keys after them
    # (Logger.makeRecord, makeLogRecord): when the record is laid out so and what follows has been seen to be
    # all extra fields (a log call passes the same keys each time), it is taken whole, without a Python-level
    # look at every attribute (a line per admission: docs/benchmarks.md, "Instructions per admission").
    standard = len(_STANDARD)
    if len(attributes) > standard and next(islice(attributes, standard - 1, None)) is _STANDARD[-1]:
        keys = tuple(islice(attributes, standard, None))
        if keys in _EXTRA_KEYS_SEEN:
            return islice(attributes.items(), standard, None)
        if not any(key in _STANDARD_ATTRS or key.startswith("_") for key in keys):
            if len(_EXTRA_KEYS_SEEN) >= 256:
                _EXTRA_KEYS_SEEN.clear()
            _EXTRA_KEYS_SEEN.add(keys)
            return islice(attributes.items(), standard, None)
    return [(key, value) for key, value in attributes.items() if key not in _STANDARD_ATTRS and not key.startswith("_")]


def _json_ascii(entry: dict) -> str:
    # orjson writes UTF-8 and refuses lone surrogates and non-string keys: such a line, and one with a
    # non-ASCII character, goes to the standard library's encoder, which escapes them.
    try:
        data = orjson.dumps(entry, default=str, option=_ORJSON_AS_STR)
    except TypeError:
        data = None
    if data is not None and data.isascii():
        return data.decode("ascii")
    return json.dumps(entry, default=str)


# Values the standard library's encoder writes with default=str (datetimes, dataclasses) are written the same
# way: str() of them, not orjson's own form.
_ORJSON_AS_STR = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
