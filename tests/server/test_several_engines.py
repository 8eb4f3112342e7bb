"""`--devices cpu,cpu`: two engine processes behind one front end, in a real server.

`--max-batch-seqs 8` cuts a request of 16 inputs into two batches; the batcher hands the
first to engine 0 and the second, while engine 0 still holds the first, to engine 1.
"""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

from tests.conftest import ServerProcess
from tests.support.fault_plugins import DIE_ID, RAISE_ID
from tests.support.helpers import MODEL, PLUGIN, assert_envelope, embed, metric, restarted_engine

pytestmark = pytest.mark.slow  # engine processes behind a real server

DP = ("--dtype", "float32", "--devices", "cpu,cpu", "--max-batch-tokens", "1024", "--max-batch-seqs", "8")


@pytest.fixture(scope="module")
def dp_server():
    proc = ServerProcess(*DP)
    yield proc
    proc.stop()


def _health(url: str) -> httpx.Response:
    return httpx.get(url + "/health", timeout=10)


def _batches(url: str, engine: int) -> float:
    return metric(url, f'rose_engine_batches_total{{device="cpu",engine="{engine}"}}')


def test_health_lists_both_engine_processes(dp_server):
    r = _health(dp_server.url)
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "ok"
    engines = body["engines"]
    assert [(e["index"], e["device"], e["state"]) for e in engines] == [(0, "cpu", "serving"), (1, "cpu", "serving")]
    pids = {e["pid"] for e in engines}
    assert len(pids) == 2 and dp_server.proc.pid not in pids  # two processes of their own


def test_vectors_equal_the_single_engine_and_both_engines_compute(dp_server, default_engine, texts):
    before = [_batches(dp_server.url, i) for i in (0, 1)]
    requests = [texts[i : i + 16] for i in range(0, 96, 16)]
    with ThreadPoolExecutor(3) as pool:
        responses = list(pool.map(lambda chunk: embed(dp_server.url, {"input": chunk, "model": MODEL}), requests))
    reference = default_engine.embed(texts[:96])
    got = []
    for r in responses:
        assert r.status_code == 200, r.text
        got += [d["embedding"] for d in r.json()["data"]]
    got = np.asarray(got, np.float32)
    cosine = (got * reference).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(reference, axis=1)
    assert cosine.min() >= 0.99999, cosine.min()
    after = [_batches(dp_server.url, i) for i in (0, 1)]
    assert after[0] > before[0] and after[1] > before[1], (before, after)
    assert sum(after) - sum(before) >= 12  # 96 inputs, at most 8 per batch


def _stream(url: str, stop_at: float, results: list) -> None:
    """Requests one after another until `stop_at`: (time sent, status, body)."""
    while time.monotonic() < stop_at:
        sent = time.monotonic()
        r = embed(url, {"input": [f"text {i} after text" for i in range(16)], "model": MODEL}, timeout=30)
        results.append((sent, r))


def test_killed_and_failing_engines_fail_only_their_batches_the_rest_serve_on_and_they_come_back():
    # Every batch takes 0.3 s (the fault plugin, applied in each engine process), so engine 1
    # surely holds a batch when it is killed.
    proc = ServerProcess(*DP, *PLUGIN, "--shutdown-timeout", "5", env={"ROSE_FAULT_DELAY_S": "0.3"})
    try:
        # A batch that raises fails its request; its engine stays in rotation.
        assert_envelope(embed(proc.url, {"input": [[101, RAISE_ID, 102]], "model": MODEL}), 500)
        assert [e["state"] for e in _health(proc.url).json()["engines"]] == ["serving", "serving"]

        results: list = []
        with ThreadPoolExecutor(3) as pool:
            streams = [pool.submit(_stream, proc.url, time.monotonic() + 4, results) for _ in range(3)]
            deadline = time.monotonic() + 20
            while not _health(proc.url).json()["engines"][1]["is_busy"]:
                assert time.monotonic() < deadline, "engine 1 never got a batch"
                time.sleep(0.02)
            victim = _health(proc.url).json()["engines"][1]["pid"]
            os.kill(victim, signal.SIGKILL)
            killed_at = time.monotonic()
            for stream in streams:
                stream.result(timeout=60)  # nothing hangs

        failed = [r for _, r in results if r.status_code != 200]
        assert failed, "the killed engine's batch failed no request"
        for r in failed:  # the other engine serves: retry at once
            assert_envelope(r, 503, "engine_unavailable")
            assert r.headers["retry-after"] == "1"
        later = [r for sent, r in results if sent > killed_at + 0.5]
        assert len(later) >= 3 and all(r.status_code == 200 for r in later)
        assert f"engine 1 on cpu (pid {victim}) died: its process was killed by SIGKILL" in proc.log_path.read_text()

        # Restarted, it serves again beside the other.
        restarted = restarted_engine(proc.url, victim, index=1)
        assert restarted["state"] == "serving"
        body = _health(proc.url).json()
        assert body["status"] == "ok" and [e["state"] for e in body["engines"]] == ["serving", "serving"]
        assert metric(proc.url, 'rose_engine_serving{device="cpu",engine="1"}') == 1.0

        # An engine process that dies of an error in a batch (SystemExit) goes the same way: its
        # request gets 503 with Retry-After, and the other engine serves the next one meanwhile.
        r = embed(proc.url, {"input": [[101, DIE_ID, 102]], "model": MODEL})
        assert_envelope(r, 503, "engine_unavailable")
        assert r.headers["retry-after"] == "1"
        assert embed(proc.url, {"input": "anyone?", "model": MODEL}, timeout=10).status_code == 200

        proc.proc.send_signal(signal.SIGTERM)
        assert proc.proc.wait(20) in (0, -signal.SIGTERM)
    finally:
        proc.stop()
