"""JSON log lines on stdout, one object per record, for the cluster's log collector.

The one log schema: the app's loggers (settings.LOGGING) and gunicorn's (gunicorn_conf.logconfig_dict)
both format with JsonFormatter, so every line the container writes has the same fields.

Every admission writes a line, so its cost is on the request path (per admission, counted with
scripts/bench-instructions: docs/benchmarks.md, "Instructions per admission"). Hence orjson, the time
text made once a second, and no record attribute computed that the line does not carry.
"""

import json
import logging
import os
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
        entry = _entry_head(record.created, record.levelname, record.name, record.getMessage(), record.process)
        entry.update(_extra_fields(vars(record)))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return _json_ascii(entry)


def _entry_head(created: float, level: str, name: str, message: str, pid: int | None) -> dict[str, object]:
    """A line's first fields: time, level, logger, message, pid."""
    second = int(created)
    cached_second, second_text = JsonFormatter._second
    if second != cached_second:
        second_text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        JsonFormatter._second = (second, second_text)
    return {
        "time": f"{second_text}.{int((created - second) * 1000):03d}Z",
        "level": level,
        "logger": name,
        "message": message,
        "pid": pid,
    }


def fields_log(logger: logging.Logger, level: int, message: str, fields: dict[str, object]) -> None:
    """`logger.log(level, message, extra=fields)`: the same line, written without a LogRecord where none is seen.

    For a line written on every request (one per admission). A LogRecord, the logger's and the handler's
    calls and the formatter's search for the extra fields were four fifths of the line's instructions
    (docs/benchmarks.md, "Instructions per admission"); the standard library has no switch that leaves
    them out. So when every handler the record would reach is a plain StreamHandler formatting with
    JsonFormatter and nothing filters, the line is made from `fields` by the formatter's own functions and
    written as StreamHandler.emit writes it (under the handler's lock, then flushed). Anything else (a filter,
    another handler or formatter, a field name a LogRecord refuses) goes through `logger.log`.
    """
    if not logger.isEnabledFor(level):
        return
    handlers = _json_stream_handlers(logger, level)
    keys = tuple(fields)
    if handlers is None or (keys not in _EXTRA_KEYS_SEEN and not _extra_keys_plain(keys)):
        logger.log(level, message, extra=fields)
        return
    entry = _entry_head(time.time(), logging.getLevelName(level), logger.name, message,
                        os.getpid() if logging.logProcesses else None)
    entry.update(fields)
    line = _json_ascii(entry)
    for handler in handlers:
        handler.acquire()
        try:
            handler.stream.write(line + handler.terminator)
            handler.flush()
        except RecursionError:  # as StreamHandler.emit
            raise
        except Exception:  # noqa: BLE001 - as StreamHandler.emit: the handler reports it (logging.raiseExceptions)
            handler.handleError(logger.makeRecord(logger.name, level, "(unknown file)", 0, message, (), None,
                                                  extra=fields))
        finally:
            handler.release()


def _json_stream_handlers(logger: logging.Logger, level: int) -> list[logging.StreamHandler] | None:
    """The handlers a record of `level` from `logger` reaches (Logger.callHandlers' walk), when the line can be
    written straight to them; None when a record must be made (a filter, a handler or formatter of another kind,
    none at all: logging's last resort)."""
    if logger.disabled or logger.filters:
        return None
    found: list[logging.StreamHandler] = []
    reached = 0
    current: logging.Logger | None = logger
    while current is not None:
        for handler in current.handlers:
            reached += 1
            if level < handler.level:
                continue
            if type(handler) is not logging.StreamHandler or type(handler.formatter) is not JsonFormatter \
                    or handler.filters:
                return None
            found.append(handler)
        current = current.parent if current.propagate else None
    return found if reached else None


def _extra_keys_plain(keys: tuple[str, ...]) -> bool:
    """Whether these extra= keys are all fields a record keeps as they are (then remembered, as _extra_fields does)."""
    if any(key in _STANDARD_ATTRS or key.startswith("_") for key in keys):
        return False
    if len(_EXTRA_KEYS_SEEN) >= 256:
        _EXTRA_KEYS_SEEN.clear()
    _EXTRA_KEYS_SEEN.add(keys)
    return True


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
