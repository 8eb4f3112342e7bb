"""`--frontend-workers 2` on CPU: two front-end processes on one port, one engine process behind both.

Each response names the front end that answered (`x-rose-worker: PID`); requests on fresh
connections spread over both (SO_REUSEPORT hashes each connection to one socket).
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
from tests.helpers import MODEL, PLUGIN, embed
from tests.processes import children, is_alive, mapped_shared_memory, shared_memory

pytestmark = pytest.mark.slow  # front-end and engine processes

ONE_FRONT_END = ("--devices", "cpu", "--max-batch-tokens", "1024", "--max-batch-seqs", "8")
WORKERS = ("--devices", "cpu", "--frontend-workers", "2", "--max-batch-tokens", "1024", "--max-batch-seqs", "8")


@pytest.fixture(scope="module")
def workers_server():
    proc = ServerProcess(*WORKERS)
    yield proc
    proc.stop()


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def test_vectors_equal_the_single_process_server(workers_server, server, texts):
    chunks = [texts[i : i + 16] for i in range(0, 96, 16)]

    def vectors(url: str) -> np.ndarray:
        with ThreadPoolExecutor(3) as pool:
            responses = list(pool.map(lambda chunk: embed(url, {"input": chunk, "model": MODEL}), chunks))
        for r in responses:
            assert r.status_code == 200, r.text
        return np.asarray([d["embedding"] for r in responses for d in r.json()["data"]], np.float32)

    got, reference = vectors(workers_server.url), vectors(server.url)
    assert got.shape == reference.shape == (96, 384)
    assert _cosine(got, reference).min() >= 0.99999


def test_both_front_ends_answer_and_share_one_engine(workers_server):
    front_ends = children(workers_server.proc.pid)
    seen: dict[int, int] = {}
    for i in range(40):  # a fresh connection each time: the kernel hashes each to one front end
        r = embed(workers_server.url, {"input": [f"request {i}"], "model": MODEL})
        assert r.status_code == 200, r.text
        pid = int(r.headers["x-rose-worker"])
        seen[pid] = seen.get(pid, 0) + 1
    assert len(seen) == 2, seen
    healths = {}
    for _ in range(60):  # after the requests, each front end's own view
        h = httpx.get(workers_server.url + "/health", timeout=10)
        assert h.status_code == 200 and int(h.headers["x-rose-worker"]) == h.json()["worker"]["pid"]
        healths[h.json()["worker"]["pid"]] = h.json()
        if len(healths) == 2:
            break
    assert workers_server.proc.pid not in seen and set(seen) <= front_ends  # the parent's own children
    assert set(healths) == set(seen)
    assert sorted(h["worker"]["index"] for h in healths.values()) == [0, 1]
    engine_pids = {h["engines"][0]["pid"] for h in healths.values()}
    assert len(engine_pids) == 1 and not engine_pids & (set(seen) | {workers_server.proc.pid})
    assert all(h["engines"][0]["batches"] > 0 for h in healths.values())  # both fed that one engine


def test_sigterm_drains_every_front_end_and_leaves_nothing_behind():
    proc = ServerProcess(*PLUGIN, *WORKERS, "--max-batch-seqs", "2", "--shutdown-timeout", "20",
                         env={"ROSE_FAULT_DELAY_S": "0.3"})
    try:
        spawned = children(proc.proc.pid)
        assert len(spawned) >= 3  # two front ends and the engine (and multiprocessing's tracker)
        segments = mapped_shared_memory({proc.proc.pid})  # the server's own (other tests may make more)
        assert segments and segments <= shared_memory()  # the slots exist while it serves
        bodies = [{"input": [f"in flight {i}"] * 4, "model": MODEL} for i in range(6)]
        with ThreadPoolExecutor(6) as pool:
            futures = [pool.submit(embed, proc.url, body) for body in bodies]
            time.sleep(1.0)
            proc.proc.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            responses = [f.result() for f in futures]
        assert [r.status_code for r in responses] == [200] * 6
        code = proc.proc.wait(40)
        assert time.monotonic() - signalled < 30
        assert code == 0, proc.log()
        deadline = time.monotonic() + 5
        while any(is_alive(pid) for pid in spawned) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in spawned if is_alive(pid)]
        assert not segments & shared_memory()
    finally:
        proc.stop()


def test_composes_with_data_parallel():
    proc = ServerProcess("--devices", "cpu,cpu", "--frontend-workers", "2",
                         "--max-batch-tokens", "1024", "--max-batch-seqs", "8")
    try:
        engines = {}
        for i in range(12):
            r = embed(proc.url, {"input": [f"text {j} of {i}" for j in range(16)], "model": MODEL})
            assert r.status_code == 200 and len(r.json()["data"]) == 16
            body = httpx.get(proc.url + "/health", timeout=10).json()
            engines[body["worker"]["pid"]] = [(e["index"], e["pid"], e["state"]) for e in body["engines"]]
        views = list(engines.values())
        assert len(views[0]) == 2 and all(state == "serving" for _, _, state in views[0])
        assert all(view == views[0] for view in views)  # every front end reaches the same two engines
    finally:
        proc.stop()
    assert proc.proc.returncode == 0


@pytest.mark.parametrize("flags, num_children", [(WORKERS, 3), (ONE_FRONT_END, 2)], ids=["two-front-ends", "one"])
@pytest.mark.parametrize("when", ["ready", "starting"])
def test_front_ends_and_engine_stop_when_the_parent_is_killed(when, flags, num_children):
    """Killed once serving, or while its children are still starting (a front end whose
    interpreter is not up yet must still learn who its parent was)."""
    proc = ServerProcess(*flags, wait_ready=when == "ready")
    try:
        deadline = time.monotonic() + 60
        while len(spawned := children(proc.proc.pid)) < num_children and time.monotonic() < deadline:
            time.sleep(0.05)  # the resource tracker, the engine and (with two) a front end at least
        assert len(spawned) >= num_children, proc.log()
        segments = mapped_shared_memory({proc.proc.pid})  # the server's own (other tests may make more)
        assert segments, "the parent creates every engine's slots before it starts a front end"
        proc.proc.kill()  # SIGKILL: the parent cannot pass anything on
        proc.proc.wait(5)
        deadline = time.monotonic() + 10  # each child notices within a second, then stops
        while any(is_alive(pid) for pid in spawned) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [pid for pid in spawned if is_alive(pid)], proc.log()
        assert not segments & shared_memory()  # multiprocessing's tracker unlinks them once all are gone
    finally:
        proc.stop()


def test_a_front_end_that_dies_is_restarted_and_the_server_serves_on():
    proc = ServerProcess(*WORKERS)
    try:
        front_ends = {h["worker"]["index"]: h["worker"]["pid"] for h in _healths(proc.url, 20)}
        assert set(front_ends) == {0, 1}
        victim = front_ends[1]
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # answered by the survivor meanwhile, then by both again
            r = embed(proc.url, {"input": ["still there"] * 4, "model": MODEL})
            assert r.status_code == 200 and len(r.json()["data"]) == 4
            now = {h["worker"]["index"]: h["worker"]["pid"] for h in _healths(proc.url, 10)}
            if now.get(1) not in (None, victim):
                break
            time.sleep(0.5)
        assert now.get(1) not in (None, victim) and now.get(0) == front_ends[0], now
        assert "front end 1 restarted" in proc.log()
        assert proc.proc.poll() is None
    finally:
        proc.stop()
    assert proc.proc.returncode == 0


def _healths(url: str, count: int) -> list[dict]:
    """/health on fresh connections, which the kernel spreads over the front ends."""
    return [httpx.get(url + "/health", timeout=10).json() for _ in range(count)]
