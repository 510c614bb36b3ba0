"""Logging set-up for `hourglass serve`: text for people, JSON lines for log pipelines.

Every record carries the id of the request being handled, if any (app/api/edge.py).
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

from app.api.edge import current_request_id

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s"


class RequestIdFilter(logging.Filter):
    """Adds `request_id` ("-" outside a request) to every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = current_request_id.get() or "-"
        return True


class JsonLines(logging.Formatter):
    """One JSON object per record: time, level, logger, message, request_id, exception."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", None),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def configure_logging(level: str = "info", json_lines: bool = False) -> None:
    """Send every logger's records (uvicorn's included) to stderr, as text or JSON lines."""
    handler = logging.StreamHandler()
    handler.addFilter(RequestIdFilter())
    handler.setFormatter(JsonLines() if json_lines else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers.clear()
        logging.getLogger(name).propagate = True
    # Readiness probes read the schema revision; Alembic would log each read.
    logging.getLogger("alembic.runtime.migration").setLevel(logging.WARNING)
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
    # httpx logs every request it sends at INFO: a line per push (app/push).
    logging.getLogger("httpx").setLevel(logging.WARNING)
