"""Cancellation, --request-timeout, back-pressure (429) and SIGTERM, on a slowed engine.

ROSE_FAULT_DELAY_S makes every batch take 0.5 s and --max-batch-seqs 2 cuts requests into
many batches, so that work is reliably queued or in flight when a test acts.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.conftest import ServerProcess
from tests.support.helpers import MODEL, PLUGIN, assert_envelope, embed, metric

pytestmark = pytest.mark.slow  # signals and timing on real server processes

DELAY = {"ROSE_FAULT_DELAY_S": "0.5"}
SLOW = (*PLUGIN, "--max-batch-tokens", "1024", "--max-batch-seqs", "2")


@pytest.fixture(scope="module")
def slow():
    proc = ServerProcess(*SLOW, "--request-timeout", "3", "--max-queued-tokens", "60", env=DELAY)
    yield proc
    proc.stop()


def _wait_idle(url: str) -> None:
    deadline = time.monotonic() + 30
    while metric(url, "rose_queue_pieces") > 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.2)  # the batches in flight finish


def test_a_disconnected_clients_queued_inputs_are_not_computed(slow):
    _wait_idle(slow.url)
    computed = metric(slow.url, "rose_sequences_total")
    cancelled = metric(slow.url, "rose_pieces_cancelled_total")
    first = {}
    # 6 inputs = 3 batches of 0.5 s each, ahead of the client that gives up: still queued when
    # it gives up, and done well inside the 3 s request timeout on a busy 2-core runner.
    thread = threading.Thread(target=lambda: first.update(r=embed(slow.url, {"input": ["a"] * 6, "model": MODEL})))
    thread.start()
    time.sleep(0.3)
    with pytest.raises(httpx.ReadTimeout):
        embed(slow.url, {"input": ["gone"] * 6, "model": MODEL}, timeout=0.5)
    thread.join(30)
    assert first["r"].status_code == 200
    _wait_idle(slow.url)
    assert metric(slow.url, "rose_sequences_total") - computed == 6
    assert metric(slow.url, "rose_pieces_cancelled_total") - cancelled == 3  # its pieces of 2 inputs each


def test_request_timeout_gives_504_in_the_envelope_and_frees_the_queue(slow):
    _wait_idle(slow.url)
    started = time.monotonic()
    r = embed(slow.url, {"input": ["slow"] * 16, "model": MODEL})  # 8 batches x 0.5 s > 3 s
    elapsed = time.monotonic() - started
    error = assert_envelope(r, 504, "request_timeout")
    assert error["type"] == "server_error"
    assert 3.0 <= elapsed < 6.0
    _wait_idle(slow.url)
    assert metric(slow.url, "rose_queue_pieces") == 0
    assert embed(slow.url, {"input": "after", "model": MODEL}).status_code == 200


def test_a_body_that_stops_arriving_gets_408_within_the_request_timeout(slow):
    """A client that sends its headers and then stalls its body (a slow loris) is answered 408 in
    the envelope once --request-timeout (3 s) has passed, and its connection is closed."""
    host, port = slow.url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=15) as sock:
        sock.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{\"input\": ")
        started = time.monotonic()
        answer = b""
        while chunk := sock.recv(65536):  # until the server closes the connection
            answer += chunk
    elapsed = time.monotonic() - started
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), answer
    error = assert_envelope(httpx.Response(408, content=body), 408, "request_timeout")
    assert error["type"] == "invalid_request_error"
    assert 2.5 <= elapsed < 8.0, elapsed
    assert embed(slow.url, {"input": "after", "model": MODEL}).status_code == 200


def test_overload_gets_429_with_an_integer_retry_after_and_a_retry_succeeds(slow):
    _wait_idle(slow.url)
    body = {"input": ["busy"] * 8, "model": MODEL}  # 24 tokens; the queue holds at most 60
    with ThreadPoolExecutor(6) as pool:
        responses = list(pool.map(lambda _: embed(slow.url, body), range(6)))
    rejected = [r for r in responses if r.status_code == 429]
    assert rejected, [r.status_code for r in responses]
    assert all(r.status_code in (200, 504) for r in responses if r.status_code != 429)
    for r in rejected:
        error = assert_envelope(r, 429, "rate_limit_exceeded")
        assert error["type"] == "rate_limit_error"
        assert r.headers["retry-after"].isdigit() and 1 <= int(r.headers["retry-after"]) <= 60
    _wait_idle(slow.url)
    time.sleep(int(rejected[0].headers["retry-after"]))
    assert embed(slow.url, {"input": ["busy"] * 2, "model": MODEL}).status_code == 200
    assert metric(slow.url, f'rose_requests_total{{model="{MODEL}",route="/v1/embeddings",status="429"}}') \
        == len(rejected)


@pytest.mark.parametrize("frontend_workers", [1, 2])
def test_sigterm_finishes_requests_in_flight_and_exits_in_time(frontend_workers):
    """New connections are refused from the SIGTERM on, with several front ends too: none waits
    in a queue that nobody accepts from, to be reset when the drain ends."""
    proc = ServerProcess(*SLOW, "--shutdown-timeout", "20", "--frontend-workers", str(frontend_workers), env=DELAY)
    try:
        bodies = [{"input": [f"in flight {i}"] * 4, "model": MODEL} for i in range(4)]  # 8 batches, ~4 s
        with ThreadPoolExecutor(4) as pool:
            futures = [pool.submit(embed, proc.url, body) for body in bodies]
            time.sleep(1.0)
            proc.proc.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            time.sleep(0.5)
            with pytest.raises(httpx.ConnectError):  # no longer accepting
                httpx.get(proc.url + "/health", timeout=2)
            responses = [f.result() for f in futures]
        assert [r.status_code for r in responses] == [200] * 4
        assert all(len(r.json()["data"]) == 4 for r in responses)
        code = proc.proc.wait(25)
        assert time.monotonic() - signalled < 20
        assert code in (0, -signal.SIGTERM)
        assert "Finished server process" in proc.log()
    finally:
        proc.stop()


def test_sigterm_cuts_off_work_past_the_shutdown_timeout():
    proc = ServerProcess(*SLOW, "--shutdown-timeout", "1", "--request-timeout", "0", env=DELAY)
    try:
        with ThreadPoolExecutor(1) as pool:
            future = pool.submit(embed, proc.url, {"input": ["long"] * 40, "model": MODEL})  # ~10 s
            time.sleep(1.0)
            proc.proc.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            code = proc.proc.wait(15)
            elapsed = time.monotonic() - signalled
            try:
                status = future.result().status_code
            except httpx.HTTPError:
                status = None  # the connection closed without an answer
        assert elapsed < 1 + 8, elapsed
        assert code in (0, -signal.SIGTERM)
        assert status in (None, 503)
        assert "Traceback" not in proc.log_path.read_text()
    finally:
        proc.stop()


@pytest.mark.parametrize("frontend_workers, to_group", [(1, True), (2, False)],
                         ids=["ctrl-c-one-process", "kill-int-frontend-workers"])
def test_a_second_ctrl_c_answers_requests_in_flight_503_and_logs_no_traceback(frontend_workers, to_group):
    """Ctrl-C twice while requests compute: the second cuts off the drain; each request still in
    flight gets a 503 in the envelope (not uvicorn's plain-text 500), the log one line, not a
    traceback per request. A terminal's Ctrl-C reaches every process of the group; `kill -INT`
    of the supervisor reaches it alone, which passes it on to its front ends."""
    proc = ServerProcess(*SLOW, "--frontend-workers", str(frontend_workers), "--shutdown-timeout", "60",
                         env=DELAY, new_session=True)
    send = os.killpg if to_group else os.kill
    try:
        # 32 batches, ~16 s; fair batches may serve one request first, which still needs 8 of them (4 s).
        bodies = [{"input": [f"in flight {i}"] * 16, "model": MODEL} for i in range(4)]
        with ThreadPoolExecutor(4) as pool:
            futures = [pool.submit(embed, proc.url, body) for body in bodies]
            time.sleep(1.0)
            send(proc.proc.pid, signal.SIGINT)
            time.sleep(0.5)
            send(proc.proc.pid, signal.SIGINT)
            forced = time.monotonic()
            responses = [f.result() for f in futures]
        assert time.monotonic() - forced < 5
        for r in responses:
            error = assert_envelope(r, 503, "server_shutting_down")
            assert error["type"] == "server_error"
        assert proc.proc.wait(30) == -signal.SIGINT
        log = proc.log_path.read_text()
        assert "Traceback" not in log and "Exception in ASGI application" not in log, log
        # Once per front end with requests to cut off: one the kernel handed none stops at once.
        assert 1 <= log.count("forcing the shutdown") <= frontend_workers, log
    finally:
        proc.stop()
