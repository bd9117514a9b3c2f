"""JSON log lines on stdout, one object per record, for the cluster's log collector.

The one log schema: the app's loggers (settings.LOGGING) and gunicorn's (gunicorn_conf.logconfig_dict)
both format with JsonFormatter, so every line the container writes has the same fields.
"""

import json
import logging
from datetime import UTC, datetime

# Attributes every LogRecord has; anything else was passed with extra= and is emitted as a field.
_STANDARD_ATTRS = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """Format a record as one JSON object: time, level, logger, message, pid, the extra fields, the exception.

    time is UTC with milliseconds and a Z; pid tells gunicorn's workers (and its master) apart.
    """

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, tz=UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        for key, value in vars(record).items():
            if key not in _STANDARD_ATTRS and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str)
