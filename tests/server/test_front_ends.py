"""`--frontend-workers 2` on CPU: two front-end processes on one port, one engine process behind both.

Each response names the front end that answered (`x-rose-worker: PID`); requests on fresh
connections spread over both (SO_REUSEPORT hashes each connection to one socket).
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.conftest import ServerProcess
from tests.support.helpers import MODEL, PLUGIN, embed, metric, sample
from tests.support.processes import children, is_alive, mapped_shared_memory, shared_memory, stats_boards

pytestmark = pytest.mark.slow  # front-end and engine processes

EMBEDDINGS_200 = f'rose_requests_total{{model="{MODEL}",route="/v1/embeddings",status="200"}}'
ONE_FRONT_END = ("--devices", "cpu", "--max-batch-tokens", "1024", "--max-batch-seqs", "8")
WORKERS = ("--dtype", "float32", "--devices", "cpu", "--frontend-workers", "2", "--max-batch-tokens", "1024",
           "--max-batch-seqs", "8")
WITH_PART_PROCESSES = (*WORKERS, "--part-processes", "1")


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
    assert workers_server.proc.pid not in seen and set(seen) <= front_ends  # the parent's own children
    body = httpx.get(workers_server.url + "/health", timeout=10).json()
    assert {f["pid"] for f in body["frontends"]} == set(seen)
    assert sorted(f["index"] for f in body["frontends"]) == [0, 1]
    (engine,) = body["engines"]
    assert engine["pid"] not in set(seen) | {workers_server.proc.pid}
    # Only the engine computes: the supervisor and the front ends never load torch (it would
    # cost each seconds to start and a few hundred MB).
    maps = {pid: Path(f"/proc/{pid}/maps").read_text() for pid in [*seen, workers_server.proc.pid]}
    assert not [pid for pid, text in maps.items() if "libtorch" in text]
    assert "libtorch" in Path(f"/proc/{engine['pid']}/maps").read_text()


def test_every_scrape_answers_for_the_whole_server(workers_server):
    """Whichever front end a scrape reaches, it counts every front end's requests, and /health
    lists both front ends."""
    def scrape() -> tuple[int, str]:  # a fresh connection each time, so scrapes reach both front ends
        r = httpx.get(workers_server.url + "/metrics", timeout=10)
        assert r.status_code == 200
        return int(r.headers["x-rose-worker"]), r.text

    _front_ends_once_serving(workers_server.url)
    time.sleep(1.0)  # every front end has reported what earlier requests did (they report every half second)
    before = scrape()[1]
    answered, tokens = set(), 0
    for i in range(24):
        r = embed(workers_server.url, {"input": [f"counted {i}", "twice"], "model": MODEL})
        assert r.status_code == 200, r.text
        answered.add(int(r.headers["x-rose-worker"]))
        tokens += r.json()["usage"]["prompt_tokens"]
    assert len(answered) == 2  # the requests went to both
    time.sleep(1.0)
    scraped = set()
    for n in range(40):
        pid, text = scrape()
        scraped.add(pid)
        for name, grew in ((EMBEDDINGS_200, 24), ("rose_tokens_total", tokens), ("rose_sequences_total", 48)):
            assert sample(text, name) - sample(before, name) == grew, (name, pid)
        if n >= 9 and len(scraped) == 2:
            break
    assert scraped == answered  # scrapes reached both front ends, and each counted all 24
    body = httpx.get(workers_server.url + "/health", timeout=10).json()
    assert body["status"] == "ok"
    assert [(f["index"], f["state"]) for f in body["frontends"]] == [(0, "serving"), (1, "serving")]
    assert {f["pid"] for f in body["frontends"]} == answered


def test_sigterm_drains_every_front_end_and_leaves_nothing_behind():
    proc = ServerProcess(*PLUGIN, *WORKERS, "--max-batch-seqs", "2", "--shutdown-timeout", "20",
                         env={"ROSE_FAULT_DELAY_S": "0.3"})
    try:
        spawned = children(proc.proc.pid)
        assert len(spawned) >= 3  # two front ends and the engine (and multiprocessing's tracker)
        segments = mapped_shared_memory({proc.proc.pid})  # the server's own (other tests may make more)
        assert segments and segments <= shared_memory()  # the slots exist while it serves
        boards = stats_boards(proc.proc.pid)
        assert len(boards) == 1
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
        assert code == -signal.SIGTERM, proc.log()  # as a server of one front end ends
        deadline = time.monotonic() + 5
        while any(is_alive(pid) for pid in spawned) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in spawned if is_alive(pid)]
        assert not segments & shared_memory()
        assert not any(board.exists() for board in boards)
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
            health = httpx.get(proc.url + "/health", timeout=10)
            engines[health.headers["x-rose-worker"]] = [(e["index"], e["pid"], e["state"])
                                                        for e in health.json()["engines"]]
        views = list(engines.values())
        assert len(views[0]) == 2 and all(state == "serving" for _, _, state in views[0])
        assert all(view == views[0] for view in views)  # every front end says the same of the two engines
        assert len(health.json()["frontends"]) == 2
    finally:
        proc.stop()
    assert proc.proc.returncode == -signal.SIGTERM


@pytest.mark.parametrize("flags, num_children", [(WORKERS, 3), (ONE_FRONT_END, 2), (WITH_PART_PROCESSES, 5)],
                         ids=["two-front-ends", "one", "part-processes"])
@pytest.mark.parametrize("when", ["ready", "starting"])
def test_front_ends_and_engine_stop_when_the_parent_is_killed(when, flags, num_children):
    """Killed once serving, or while its children are still starting (a front end whose
    interpreter is not up yet must still learn who its parent was)."""
    part_folders = set(Path(tempfile.gettempdir()).glob("rose-parts-*"))
    proc = ServerProcess(*flags, wait_ready=when == "ready")
    try:
        deadline = time.monotonic() + 60
        while len(spawned := children(proc.proc.pid)) < num_children and time.monotonic() < deadline:
            time.sleep(0.05)  # the resource tracker, the engine and (with two) a front end at least
        assert len(spawned) >= num_children, proc.log()
        segments = mapped_shared_memory({proc.proc.pid})  # the server's own (other tests may make more)
        assert segments, "the parent creates every engine's slots before it starts a front end"
        boards = stats_boards(proc.proc.pid)
        # One front end runs in the supervisor's process, with no board; several report to one.
        assert len(boards) == (0 if flags is ONE_FRONT_END else 1), "it is made before a front end starts"
        proc.proc.kill()  # SIGKILL: the parent cannot pass anything on
        proc.proc.wait(5)
        deadline = time.monotonic() + 10  # each child notices within a second, then stops
        while any(is_alive(pid) for pid in spawned) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [pid for pid in spawned if is_alive(pid)], proc.log()
        assert not segments & shared_memory()  # multiprocessing's tracker unlinks them once all are gone
        assert not any(board.exists() for board in boards)  # an orphaned front end removes it
        # Orphaned part processes remove their sockets and folder.
        assert set(Path(tempfile.gettempdir()).glob("rose-parts-*")) <= part_folders
    finally:
        proc.stop()


def test_a_front_end_that_dies_is_restarted_and_the_server_serves_on():
    """/health says which front end is out (hung, then killed); the dead one's counts stay in /metrics."""
    proc = ServerProcess(*WORKERS)
    try:
        front_ends = _front_ends_once_serving(proc.url)
        assert set(front_ends) == {0, 1}
        for i in range(8):
            assert embed(proc.url, {"input": [f"before {i}"], "model": MODEL}).status_code == 200
        time.sleep(1.0)  # both front ends have reported them (every half second)
        before = metric(proc.url, EMBEDDINGS_200)
        assert before >= 8
        victim = front_ends[1]
        os.kill(victim, signal.SIGSTOP)  # hung first: silent, but not gone, so not restarted yet
        assert _out(proc.url, victim, "it has not reported for")
        os.kill(victim, signal.SIGKILL)
        deadline, sent = time.monotonic() + 60, 0
        while time.monotonic() < deadline:  # answered by the survivor meanwhile, then by both again
            r = embed(proc.url, {"input": ["still there"] * 4, "model": MODEL})
            assert r.status_code == 200 and len(r.json()["data"]) == 4
            sent += 1
            health = httpx.get(proc.url + "/health", timeout=10)
            assert health.status_code == 200  # the other front end serves on
            now = {f["index"]: f for f in health.json()["frontends"]}
            if now[1]["pid"] != victim and now[1]["state"] == "serving":
                break
            time.sleep(0.5)
        assert now[1]["pid"] != victim and now[1]["restarts"] == 1 and now[0]["pid"] == front_ends[0], now
        assert "front end 1 restarted" in proc.log()
        time.sleep(1.0)
        for _ in range(6):  # whichever front end answers: the dead one's counts are kept
            assert metric(proc.url, EMBEDDINGS_200) == before + sent
        assert proc.proc.poll() is None
        proc.proc.send_signal(signal.SIGINT)  # Ctrl-C: drained, then ended by SIGINT, as with one front end
        assert proc.proc.wait(40) == -signal.SIGINT, proc.log()
        assert "Traceback" not in proc.log()
    finally:
        proc.stop()


def test_a_front_end_that_dies_again_soon_after_its_restart_stops_the_server():
    """A front end that cannot stay up is not restarted for ever: the server exits 1, for the
    orchestrator to restart it, and leaves nothing behind."""
    proc = ServerProcess(*WORKERS)
    try:
        front_ends = _front_ends_once_serving(proc.url)
        spawned, segments = children(proc.proc.pid), mapped_shared_memory({proc.proc.pid})
        boards = stats_boards(proc.proc.pid)
        os.kill(front_ends[1], signal.SIGKILL)
        deadline = time.monotonic() + 60
        while "front end 1 restarted (pid " not in proc.log() and time.monotonic() < deadline:
            time.sleep(0.2)
        restarted = int(proc.log().split("front end 1 restarted (pid ", 1)[1].split(")", 1)[0])
        os.kill(restarted, signal.SIGKILL)  # well within the 30 s after its restart
        assert proc.proc.wait(60) == 1, proc.log()
        assert "front end 1 did not stay up after its restart" in proc.log()
        # multiprocessing's resource tracker exits once it reads the end of its pipe, a moment
        # after the supervisor itself.
        deadline = time.monotonic() + 5
        while any(is_alive(pid) for pid in [*spawned, restarted]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in [*spawned, restarted] if is_alive(pid)], proc.log()
        assert not segments & shared_memory()
        assert boards and not any(board.exists() for board in boards)
    finally:
        proc.stop()


def _out(url: str, victim: int, reason: str) -> bool:
    """Whether /health, from the other front end, soon names front end 1 (`victim`) out for `reason`
    (a connection that reaches the victim's socket waits: given up on, and another tried)."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            health = httpx.get(url + "/health", timeout=0.5)
        except httpx.TimeoutException:
            continue
        assert health.status_code == 200  # the other front end serves on
        (front_end,) = [f for f in health.json()["frontends"] if f["index"] == 1]
        if front_end["pid"] == victim and front_end["state"] == "out" and front_end["reason"].startswith(reason):
            return True
        time.sleep(0.2)
    return False


def _front_ends_once_serving(url: str) -> dict[int, int]:
    """Each front end's pid by index, once /health says both serve (the second may start later)."""
    deadline = time.monotonic() + 60
    while True:
        front_ends = httpx.get(url + "/health", timeout=10).json()["frontends"]
        if [f["state"] for f in front_ends] == ["serving", "serving"]:
            return {f["index"]: f["pid"] for f in front_ends}
        assert time.monotonic() < deadline, front_ends
        time.sleep(0.2)
