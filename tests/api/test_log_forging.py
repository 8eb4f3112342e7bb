"""What a client sends cannot forge a log line or drive the terminal that shows the log: line
breaks, ANSI escapes and other control characters in a path, a text or an exception come out
escaped, in text and in JSON logs (server/http/logs.py; fake engine, in process)."""

from __future__ import annotations

import json
import logging
import re
import sys
import urllib.parse

import pytest

from rose_embed.server.http.logs import ACCESS_LOGGER, JsonFormatter, TextFormatter
from tests.support.fake_engine import FAKE_MODEL, FakeEngine, fake_config, serve

FORGED = "2026-12-07 03:00:00,000 ERROR rose_embed.server: FORGED"
# CR, LF, an ANSI colour (ESC [), the 8-bit CSI (C1 0x9b), DEL, and Unicode's line separator.
HOSTILE = ["\n" + FORGED, "\r" + FORGED, "\x1b[31mred\x1b[0m", "\x9b2J", "\x7f", "\u2028" + FORGED]
RAW_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


@pytest.fixture(scope="module")
def client():
    with serve(FakeEngine(), fake_config(log_inputs=True)) as client:
        yield client


def _record(caplog, request_id: str) -> logging.LogRecord:
    (record,) = [r for r in caplog.records if r.name == ACCESS_LOGGER and r.fields.get("request_id") == request_id]
    return record


@pytest.mark.parametrize("hostile", HOSTILE, ids=["LF", "CR", "ANSI", "C1 CSI", "DEL", "U+2028"])
def test_a_hostile_path_is_one_escaped_line_in_text_and_valid_json(client, caplog, hostile):
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    path = "/x" + hostile
    assert client.get(urllib.parse.quote(path), headers={"x-request-id": "forge-1"}).status_code == 404
    record = _record(caplog, "forge-1")
    line = TextFormatter().format(record)
    assert not RAW_CONTROL.search(line), repr(line)
    assert "\n" not in line and f"GET {json.dumps(path)[1:-1]} 404" in line  # one line, escaped as JSON writes it
    entry = JsonFormatter().format(record)
    assert not RAW_CONTROL.search(entry), repr(entry)
    assert json.loads(entry)["message"] == f"GET {path} 404"  # valid JSON, the path as it came


def test_logged_input_texts_are_escaped_in_text_and_valid_json(client, caplog):
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    texts = [f"text{hostile}" for hostile in HOSTILE]
    r = client.post("/v1/embeddings", json={"model": FAKE_MODEL, "input": texts}, headers={"x-request-id": "forge-2"})
    assert r.status_code == 200
    record = _record(caplog, "forge-2")
    line = TextFormatter().format(record)
    assert not RAW_CONTROL.search(line) and "\\n" + FORGED in line
    entry = JsonFormatter().format(record)
    assert not RAW_CONTROL.search(entry)
    assert json.loads(entry)["inputs_text"] == texts


def test_no_line_of_a_traceback_passes_for_a_record_of_its_own():
    try:
        raise ValueError("bad value\n" + FORGED + "\x1b[2J")
    except ValueError:
        record = logging.getLogger("rose_embed.errors").makeRecord(
            "rose_embed.errors", logging.ERROR, __file__, 1, "unhandled error", (), sys.exc_info())
    first, *rest = TextFormatter().format(record).split("\n")
    assert first.endswith("ERROR rose_embed.errors: unhandled error")
    assert rest and all(line.startswith(" ") for line in rest), rest  # indented: none starts with a date
    assert any(FORGED in line for line in rest) and not any(RAW_CONTROL.search(line) for line in rest)
    entry = json.loads(JsonFormatter().format(record))
    assert FORGED in entry["exception"] and "\x1b" in entry["exception"]  # JSON carries it escaped, whole
