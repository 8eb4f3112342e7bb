"""Logging set-up: plain text or one JSON object per line (--log-format json).

Log lines carry what clients sent (a request's path, a model name, with --log-inputs the texts),
and a client may send a line break or a terminal escape in them: `GET /x%0a2026-... ERROR ...`
would write a forged line of its own, an escape sequence would rewrite the terminal that shows
the log. So every control character in a record (C0, DEL, C1, and the Unicode line and paragraph
separators that some viewers break lines at) is written as a JSON-style escape (`\\n`,
`\\u001b`), in either format, whoever logged it; a text record's later lines (a traceback's) are
indented, so that no line of one record can pass for the start of another.
"""

from __future__ import annotations

import json
import logging
import re
import time

ACCESS_LOGGER = "rose_embed.access"
_TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# What json.dumps leaves as it is (it escapes the C0 controls itself); only ever inside a string.
_JSON_UNESCAPED_CONTROLS = re.compile("[\x7f-\x9f\u2028\u2029]")
_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_INDENT = "    "


def _escape(match: re.Match) -> str:
    char = match.group()
    return _SHORT_ESCAPES.get(char) or f"\\u{ord(char):04x}"


def escape_controls(text: str) -> str:
    """`text` with every control character written as an escape, on one line."""
    return _CONTROLS.sub(_escape, text)


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
        return _JSON_UNESCAPED_CONTROLS.sub(_escape, json.dumps(entry, ensure_ascii=False, default=str))


class TextFormatter(logging.Formatter):
    """The usual line, with a record's `fields` appended as key=value."""

    def __init__(self):
        super().__init__(_TEXT_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:
        return escape_controls(super().formatMessage(record))

    def formatException(self, ei) -> str:
        return _indented(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:
        return _indented(super().formatStack(stack_info))

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = getattr(record, "fields", None)
        if fields:
            line += " " + " ".join(f"{k}={_field_value(v)}" for k, v in fields.items())
        return line


def _field_value(value) -> str:
    if isinstance(value, (int, float)):
        return str(value)
    text = json.dumps(value, ensure_ascii=False) if isinstance(value, (str, list)) else str(value)
    return escape_controls(text)


def _indented(text: str) -> str:
    return "\n".join(_INDENT + escape_controls(line) for line in text.split("\n"))


def configure_logging(level: str, log_format: str) -> None:
    """Root logger only: uvicorn is started with log_config=None so its records come here too."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
