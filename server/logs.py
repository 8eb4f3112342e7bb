"""Logging set-up: plain text or one JSON object per line (--log-format json)."""

from __future__ import annotations

import json
import logging
import time

ACCESS_LOGGER = "rose_embed.access"
_TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record; a record's `fields` extra becomes top-level keys."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(getattr(record, "fields", {}))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """The usual line, with a record's `fields` appended as key=value."""

    def __init__(self):
        super().__init__(_TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = getattr(record, "fields", None)
        if fields:
            line += " " + " ".join(f"{k}={json.dumps(v, ensure_ascii=False) if isinstance(v, (str, list)) else v}"
                                   for k, v in fields.items())
        return line


def configure_logging(level: str, log_format: str) -> None:
    """Root logger only: uvicorn is started with log_config=None so its records come here too."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
