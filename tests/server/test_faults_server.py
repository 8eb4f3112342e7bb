"""Fault injection against a real server process (tests/support/fault_plugins.py wraps its engine)."""

from __future__ import annotations

import signal
import time

import httpx
import numpy as np
import pytest

from tests.conftest import ServerProcess
from tests.support.fault_plugins import DIE_ID, NAN_ID, RAISE_ID, STALL_ID
from tests.support.helpers import MODEL, PLUGIN, assert_envelope, embed, metric, restarted_engine

pytestmark = pytest.mark.slow  # faults injected into real server processes

SMALL = ("--max-batch-tokens", "1024")


@pytest.fixture(scope="module")
def faulty():
    proc = ServerProcess(*PLUGIN, *SMALL)
    yield proc
    proc.stop()


def test_a_raising_batch_fails_its_request_and_the_next_batch_runs(faulty):
    before = embed(faulty.url, {"input": ["fault isolation"], "model": MODEL})
    assert before.status_code == 200
    r = embed(faulty.url, {"input": [[101, RAISE_ID, 102]], "model": MODEL})
    error = assert_envelope(r, 500)
    assert error["type"] == "server_error"
    after = embed(faulty.url, {"input": ["fault isolation"], "model": MODEL})
    assert after.status_code == 200
    np.testing.assert_allclose(after.json()["data"][0]["embedding"], before.json()["data"][0]["embedding"], atol=1e-5)
    assert metric(faulty.url, "rose_batches_failed_total") >= 1
    assert httpx.get(faulty.url + "/health", timeout=10).status_code == 200


def test_a_non_finite_vector_is_never_sent(faulty):
    for encoding_format in ("float", "base64"):
        r = embed(faulty.url, {"input": [[101, 2204, 102], [101, NAN_ID, 102]], "model": MODEL,
                               "encoding_format": encoding_format})
        assert_envelope(r, 500, "non_finite_embedding")
        assert "NaN" not in r.text
    assert embed(faulty.url, {"input": [[101, 2204, 102]], "model": MODEL}).status_code == 200


def stop_within(proc: ServerProcess, seconds: float) -> None:
    """SIGTERM; the server shuts down gracefully and exits in time (uvicorn then re-raises SIGTERM)."""
    proc.proc.send_signal(signal.SIGTERM)
    started = time.monotonic()
    code = proc.proc.wait(seconds)
    assert time.monotonic() - started < seconds
    assert code in (0, -signal.SIGTERM), code
    assert "Finished server process" in proc.log()


def test_an_engine_that_dies_in_a_batch_fails_it_503_with_retry_after_and_is_restarted():
    proc = ServerProcess(*PLUGIN, *SMALL, "--shutdown-timeout", "5")
    try:
        assert embed(proc.url, {"input": "alive", "model": MODEL}).status_code == 200
        victim = httpx.get(proc.url + "/health", timeout=10).json()["engines"][0]["pid"]
        r = embed(proc.url, {"input": [[101, DIE_ID, 102]], "model": MODEL})
        assert_envelope(r, 503, "engine_unavailable")
        assert 1 <= int(r.headers["retry-after"]) <= 60
        restarted_engine(proc.url, victim)
        assert f"engine 0 on cpu (pid {victim}) died: its process exited with status 1; restarting it" in proc.log()
        assert embed(proc.url, {"input": "anyone there?", "model": MODEL}).status_code == 200
        assert metric(proc.url, "rose_engine_up") == 1.0
        stop_within(proc, 15)
    finally:
        proc.stop()


def test_a_batch_past_the_stall_timeout_fails_its_waiters_and_its_engine_is_killed_and_restarted():
    stall = 2.0
    proc = ServerProcess(*PLUGIN, *SMALL, "--engine-stall-timeout", str(stall), "--shutdown-timeout", "3")
    try:
        victim = httpx.get(proc.url + "/health", timeout=10).json()["engines"][0]["pid"]
        started = time.monotonic()
        r = embed(proc.url, {"input": [[101, STALL_ID, 102]], "model": MODEL}, timeout=60)
        assert_envelope(r, 503, "engine_unavailable")
        # The ceiling wins over the floor (30 s) and 10 times the longest batch.
        assert stall <= time.monotonic() - started < stall + 8
        assert f"engine 0 on cpu (pid {victim}): the engine is stuck" in proc.log()
        restarted_engine(proc.url, victim)
        assert embed(proc.url, {"input": "hello", "model": MODEL}).status_code == 200
        stop_within(proc, 3 + 12)
    finally:
        proc.stop()
