"""The HTTP layer's guards on a real server process (`rose-embed serve`, the default model): a
64 MiB header while /health is polled, 300 slow lorises and the process's file descriptors, a
forged log line, a slow upload at SIGTERM. The mechanisms, on uvicorn in a thread:
test_untrusted_clients.py."""

from __future__ import annotations

import os
import signal
import socket
import time
import urllib.parse

import httpx
import pytest

from tests.conftest import ServerProcess
from tests.support.helpers import MODEL, assert_envelope, embed
from tests.support.raw_http import MiB, huge_header_while_polling_health, read_until_closed, split_response

pytestmark = pytest.mark.slow  # real server processes

FORGED = "2026-12-07 03:00:00,000 ERROR rose_embed.server: FORGED"


@pytest.fixture(scope="module")
def guarded():
    proc = ServerProcess("--max-batch-tokens", "512", "--header-timeout", "1")
    yield proc
    proc.stop()


def _descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_a_64_mib_header_gets_431_while_health_answers_within_its_probe_timeout(guarded):
    data, seconds, longest = huge_header_while_polling_health(guarded.url, guarded.port, 64 * MiB)
    status, _, body = split_response(data)
    assert_envelope(httpx.Response(status, content=body), 431, "request_headers_too_large")
    assert seconds < 1.0, seconds
    assert longest < 1.0, longest  # the manifests' readiness probe allows 5 s; before, /health waited 4 s


def test_300_slow_lorises_are_closed_and_the_descriptors_come_back(guarded):
    pid = guarded.proc.pid  # one front end: it runs in the supervisor's process
    before = _descriptors(pid)
    lorises = [socket.create_connection(("127.0.0.1", guarded.port), timeout=10) for _ in range(300)]
    try:
        for sock in lorises:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-a: ")
        time.sleep(0.3)
        held = _descriptors(pid)
        answers = [read_until_closed(sock) for sock in lorises]  # each closed after the 1 s header timeout
    finally:
        for sock in lorises:
            sock.close()
    assert held >= before + 250, (before, held)  # the front end did hold them
    assert all(split_response(answer)[0] == 408 for answer in answers)
    deadline = time.monotonic() + 10
    while _descriptors(pid) > before + 5 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _descriptors(pid) <= before + 5, (before, _descriptors(pid))
    assert embed(guarded.url, {"input": "after the lorises", "model": MODEL}).status_code == 200


def test_a_line_break_in_a_path_forges_no_log_line(guarded):
    r = httpx.get(guarded.url + urllib.parse.quote("/x\n" + FORGED + "\r\x1b[31m"), timeout=10)
    assert r.status_code == 404
    time.sleep(0.3)
    log = guarded.log_path.read_text()
    assert FORGED in log  # logged, escaped, inside the request's line
    assert not [line for line in log.splitlines() if line.startswith(FORGED)]
    assert "\x1b" not in log


def test_sigterm_answers_a_slow_upload_503_at_once_and_exits_without_waiting_for_it():
    proc = ServerProcess("--max-batch-tokens", "512", "--shutdown-timeout", "30")
    try:
        upload = socket.create_connection(("127.0.0.1", proc.port), timeout=20)
        upload.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       b"Content-Length: 1000\r\n\r\n{\"input\": ")
        time.sleep(0.3)
        proc.proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        status, _, body = split_response(read_until_closed(upload))
        answered = time.monotonic() - signalled
        upload.close()
        code = proc.proc.wait(40)
        stopped = time.monotonic() - signalled
    finally:
        proc.stop()
    assert_envelope(httpx.Response(status, content=body), 503, "server_shutting_down")
    assert answered < 1.0, answered
    assert stopped < 10, stopped  # the engine's stop, not the 30 s the upload would have held it
    assert code in (0, -signal.SIGTERM)
