"""One JSON object per line, the request id (and trace id) copied onto every record, uvicorn's included."""
from __future__ import annotations

import json
import logging
import time

from .cycle import current_id
from .tracing import current_trace_id

# Anything else on a record came from extra= and is written as a field of its own.
_RECORD_ATTRIBUTES = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message", "asctime", "request_id", "trace_id",
    "color_message",  # uvicorn's
}


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = current_id()
        record.trace_id = current_trace_id()
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", None),
        }
        trace_id = getattr(record, "trace_id", None)
        if trace_id is not None:
            line["trace_id"] = trace_id
        for key, value in record.__dict__.items():
            if key not in _RECORD_ATTRIBUTES:
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        return json.dumps(line, ensure_ascii=False, default=str)


def log_config(level: str = "INFO") -> dict:
    """uvicorn's access log stays off: the shim writes its own line per request."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"request_id": {"()": RequestIdFilter}},
        "formatters": {"json": {"()": JsonFormatter}},
        "handlers": {"stdout": {"class": "logging.StreamHandler", "stream": "ext://sys.stdout",
                                "formatter": "json", "filters": ["request_id"]}},
        "root": {"handlers": ["stdout"], "level": level},
        "loggers": {
            "uvicorn": {"handlers": [], "propagate": True, "level": level},
            "uvicorn.error": {"handlers": [], "propagate": True, "level": level},
            "uvicorn.access": {"handlers": [], "propagate": False},
        },
    }
