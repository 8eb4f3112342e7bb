"""A real server's engine process killed (SIGKILL) or stopped (SIGSTOP), and a server killed
outright: the supervisor restarts the engine (server/processes/engine_keeper.py), the front end takes the
new one up (server/links/reattach.py), the stall watch notices a silent one
(server/links/stall_watch.py), and the next start removes what a dead server left in /dev/shm
(server/processes/stale_memory.py)."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

from rose_embed.engine.contract.owner_lock import hold
from rose_embed.engine.contract.shared_blocks import BLOCK_PREFIX, close_block, create_block
from tests.conftest import ServerProcess
from tests.support.helpers import MODEL, PLUGIN, assert_envelope, embed, restarted_engine
from tests.support.processes import block_creator, session_members, shared_memory, stats_boards

pytestmark = pytest.mark.slow  # real servers, engines killed and started again


def _health(url: str) -> httpx.Response:
    return httpx.get(url + "/health", timeout=10)


def _engine(url: str) -> dict:
    return _health(url).json()["engines"][0]


def _until(condition: Callable[[], object], timeout: float, what: str, step: float = 0.05):
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        assert time.monotonic() < deadline, what
        time.sleep(step)
    return result


def _log(proc: ServerProcess) -> str:
    return proc.log_path.read_text(errors="replace")


def _retry_after(r: httpx.Response) -> int:
    value = int(r.headers["retry-after"])
    assert 1 <= value <= 60, value
    return value


def test_a_killed_engine_fails_its_requests_503_with_retry_after_is_logged_and_restarted():
    # Every batch takes a second (the fault plugin), so a request is surely in flight when the engine dies.
    proc = ServerProcess(*PLUGIN, "--max-batch-tokens", "1024", env={"ROSE_FAULT_DELAY_S": "1.0"})
    try:
        before = embed(proc.url, {"input": "the same text, before and after", "model": MODEL})
        assert before.status_code == 200
        victim = _engine(proc.url)["pid"]
        with ThreadPoolExecutor(1) as pool:
            in_flight = pool.submit(embed, proc.url, {"input": "caught in the middle", "model": MODEL})
            _until(lambda: _engine(proc.url)["is_busy"], 30, "the request never reached the engine", step=0.02)
            os.kill(victim, signal.SIGKILL)
            r = in_flight.result(timeout=30)
        assert_envelope(r, 503, "engine_unavailable")
        _retry_after(r)
        health = _health(proc.url)  # the restarted engine takes seconds to load: no engine serves yet
        assert "SIGKILL" in assert_envelope(health, 503, "engine_unavailable")["message"]
        _retry_after(health)
        refused = embed(proc.url, {"input": "meanwhile", "model": MODEL})
        assert_envelope(refused, 503, "engine_unavailable")
        _retry_after(refused)
        line = rf"ERROR .*engine 0 on cpu \(pid {victim}\) died: its process was killed by SIGKILL; restarting it"
        _until(lambda: re.search(line, _log(proc)), 10, f"no log line names the death:\n{_log(proc)}")

        engine = restarted_engine(proc.url, victim)
        assert engine["state"] == "serving"
        after = embed(proc.url, {"input": "the same text, before and after", "model": MODEL})
        assert after.status_code == 200, after.text
        np.testing.assert_allclose(after.json()["data"][0]["embedding"], before.json()["data"][0]["embedding"],
                                   atol=1e-5)
        assert re.search(r"engine 0 on cpu is warm again after", _log(proc))
    finally:
        proc.stop()


def test_a_stopped_engine_turns_health_503_within_the_bound_its_batches_set_and_is_restarted():
    # Batches of 0.4 s (the fault plugin) set the bound to 10 x 0.4 s, above the floor of 1 s; a
    # batch nearly full keeps the allowance for a full one below that.
    floor, batch = 1.0, 0.4
    proc = ServerProcess(*PLUGIN, "--engine-stall-floor", str(floor), "--max-batch-tokens", "256",
                         env={"ROSE_FAULT_DELAY_S": str(batch)})
    try:
        measured = embed(proc.url, {"input": "a batch to measure" + " word" * 200, "model": MODEL})
        assert measured.status_code == 200
        longest = float(measured.headers["x-inference-time-ms"]) / 1000  # its batch's time, as the board has it
        assert longest >= batch
        assert _health(proc.url).status_code == 200
        victim = _engine(proc.url)["pid"]
        os.kill(victim, signal.SIGSTOP)  # between batches: nothing on the device, nothing queued
        try:
            with ThreadPoolExecutor(1) as pool:
                sent = time.monotonic()
                waiting = pool.submit(embed, proc.url, {"input": "sent to a stopped engine", "model": MODEL})
                health = _until(lambda: (r := _health(proc.url)).status_code == 503 and r, 60,
                                "/health never turned 503")
                noticed = time.monotonic() - sent
                r = waiting.result(timeout=30)
        finally:
            try:
                os.kill(victim, signal.SIGCONT)  # had it not been killed, let the server stop it
            except ProcessLookupError:
                pass
        # The watchdog looks every second; the bound is derived from the batches, far above the floor.
        assert 10 * longest - 0.5 <= noticed <= 10 * longest + 3.0, (noticed, longest, _log(proc))
        assert "stuck" in assert_envelope(health, 503, "engine_unavailable")["message"]
        assert_envelope(r, 503, "engine_unavailable")
        _retry_after(r)
        log = _log(proc)
        assert re.search(rf"ERROR .*engine 0 on cpu \(pid {victim}\): the engine is stuck: no batch has finished "
                         r"for [\d.]+ s with work waiting \(the bound: [\d.]+ s\); killing it", log), log
        died = rf"engine 0 on cpu \(pid {victim}\) died: its process was killed by SIGKILL"
        _until(lambda: re.search(died, _log(proc)), 10, f"the supervisor did not log the kill:\n{_log(proc)}")

        restarted_engine(proc.url, victim)
        assert embed(proc.url, {"input": "served again", "model": MODEL}).status_code == 200
    finally:
        proc.stop()


def test_an_engine_that_keeps_dying_stops_the_server_with_status_1():
    proc = ServerProcess("--engine-max-restarts", "1", new_session=True)
    try:
        first = _engine(proc.url)["pid"]
        os.kill(first, signal.SIGKILL)
        second = restarted_engine(proc.url, first)["pid"]
        os.kill(second, signal.SIGKILL)
        assert proc.proc.wait(60) == 1
        log = _log(proc)
        assert re.search(rf"engine 0 on cpu \(pid {second}\) died: its process was killed by SIGKILL; it was "
                         r"restarted 1 time\(s\) within 600 s .*; stopping the server \(exit status 1\)", log), log
        assert "Traceback" not in log
        _until(lambda: not session_members(proc.proc.pid), 10, "processes outlived the server")
        assert not {name for name in shared_memory() if block_creator(name) == proc.proc.pid}
    finally:
        proc.stop()


def test_what_a_server_killed_outright_left_in_dev_shm_is_removed_at_the_next_start():
    victim = ServerProcess("--frontend-workers", "2", new_session=True)
    blocks = {name for name in shared_memory() if block_creator(name) == victim.proc.pid}
    boards = stats_boards(victim.proc.pid)
    assert blocks and boards
    os.killpg(victim.proc.pid, signal.SIGKILL)  # the resource tracker goes too: nobody unlinks them
    victim.proc.wait()
    _until(lambda: not session_members(victim.proc.pid), 10, "the killed server's processes stayed")
    victim.stop()
    assert blocks <= shared_memory() and all(board.exists() for board in boards)

    # A live process's block, and one named after a process this PID namespace does not see but
    # locked by a live one (a server in another container sharing /dev/shm): both stay.
    live = create_block(4096)
    foreign = f"/dev/shm/{BLOCK_PREFIX}{victim.proc.pid}-feedf00d"
    fd = os.open(foreign, os.O_CREAT | os.O_RDWR, 0o600)
    hold(fd)
    try:
        proc = ServerProcess()
        try:
            assert not blocks & shared_memory()
            assert not any(board.exists() for board in boards)
            assert live.name in shared_memory() and os.path.exists(foreign)
            # Under pytest -n, a server another test starts meanwhile may be the one that removed
            # them, saying so in its own log; run alone, this server did and its log names the pid.
            named = re.search(r"WARNING .*removed \d+ shared-memory block\(s\) and stats board\(s\) that stopped "
                              rf"servers left in /dev/shm \(pids [\d, ]*\b{victim.proc.pid}\b", _log(proc))
            assert named or os.environ.get("PYTEST_XDIST_WORKER"), _log(proc)
        finally:
            proc.stop()
    finally:
        close_block(live, is_owner=True)
        os.close(fd)
        os.unlink(foreign)
