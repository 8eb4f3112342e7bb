"""`rose-embed serve` as a process: a taken port, a model that cannot load, and Ctrl-C, a hang-up
or SIGTERM while it starts.

Each server runs in a session of its own (as a terminal's job would), so that a signal can go
to its whole process group, as Ctrl-C and a hang-up do, and so that every process it started,
grandchildren and adopted orphans included, can be found afterwards by its session.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from tests.conftest import REPO, free_port
from tests.support.processes import (block_creator, command_line, is_alive, mapped_shared_memory, session_members,
                             shared_memory)

pytestmark = pytest.mark.slow


def _start(*flags: str, port: int) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    # A terminal's job takes Ctrl-C. Had this test run been started in the background of a
    # script, SIGINT would be ignored here, and a child inherits an ignored signal (a handled
    # one is reset to its default): the server would then rightly ignore Ctrl-C.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen([sys.executable, "-m", "rose_embed", "serve", "--port", str(port), *flags], cwd=REPO,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
    finally:
        signal.signal(signal.SIGINT, previous)


def _left_behind(server_pid: int) -> set[str]:
    """The shared memory a server that has exited left behind. Its supervisor makes every block
    (engine/contract/shared_blocks.py names each after its maker), so the tests running beside, which make
    and free their own meanwhile, are not counted."""
    return {name for name in shared_memory() if block_creator(name) == server_pid}


def _none_left(session_id: int, timeout: float = 5.0) -> set[int]:
    deadline = time.monotonic() + timeout
    while (left := session_members(session_id)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


@pytest.mark.parametrize("flags", [(), ("--frontend-workers", "2")], ids=["one-process", "frontend-workers"])
def test_a_taken_port_is_one_line_and_a_quick_exit_with_nothing_left(flags):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        started = time.monotonic()
        proc = _start(*flags, port=port)
        try:
            out, err = proc.communicate(timeout=5)
        finally:
            proc.kill()
        assert time.monotonic() - started < 5
    assert proc.returncode != 0
    assert err.splitlines() == [f"rose-embed: cannot listen on 127.0.0.1:{port}: Address already in use"]
    assert out == ""  # no banner: it says where the server listens, and it does not
    assert not _none_left(proc.pid)
    assert not _left_behind(proc.pid)


@pytest.mark.parametrize("frontend_workers", ["1", "2"])
def test_weights_that_do_not_load_stop_the_server_with_one_line_and_status_1(tmp_path, frontend_workers):
    """They pass every check made before the port is bound; the engine process finds them broken.
    Restarting front ends, or ending as if killed by SIGTERM, would only hide that."""
    from rose_embed.engine.model_files.loader import resolve_model_dir

    model = tmp_path / "model"
    shutil.copytree(resolve_model_dir(None)[0], model)
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    proc = _start("--model", str(model), "--devices", "cpu", "--frontend-workers", frontend_workers,
                  port=free_port())
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 1, err
    errors = [line for line in err.splitlines() if " ERROR " in line]
    # A line from each front end, and with several, the supervisor's.
    assert all("engine 0 on cpu failed to load" in line for line in errors), err
    assert any(f"failed to load: model {model} could not be loaded on cpu: SafetensorError" in line
               for line in errors), err
    assert "Traceback" not in err and "restarted" not in err, err
    assert not _none_left(proc.pid)
    assert not _left_behind(proc.pid)


def _engine_child(session_id: int, timeout: float = 60.0) -> int:
    """Wait until the engine process has been spawned (it then imports torch for a few seconds)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in session_members(session_id):
            if "spawn_main" in command_line(pid):
                return pid
        time.sleep(0.02)
    raise AssertionError("no engine process was started")


def _sample_left(proc: subprocess.Popen, engine: int, since: float, left: list, timeout: float = 20.0) -> None:
    """Until the server exits: every half second, which of its processes are still alive, into `left`
    (for a stop that takes too long, which one held it: it passed alone and failed under the whole suite)."""
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        alive = session_members(proc.pid) - {proc.pid}
        names = sorted("engine" if pid == engine else command_line(pid)[-45:] for pid in alive)
        left.append((round(time.monotonic() - since, 1), names))
        time.sleep(0.5)


# Ctrl-C and a closed terminal reach the whole foreground group; `kill` reaches one process.
@pytest.mark.parametrize("sig, to_group, delay, expected", [
    (signal.SIGINT, True, 0.0, -signal.SIGINT),  # while the engine process imports torch
    # Most often while the supervisor imports uvicorn and the app for its front end.
    (signal.SIGINT, True, 0.3, -signal.SIGINT),
    (signal.SIGINT, True, 1.5, -signal.SIGINT),  # while the engine loads the model
    (signal.SIGHUP, True, 0.0, -signal.SIGTERM),
    (signal.SIGHUP, False, 1.5, -signal.SIGTERM),
    (signal.SIGTERM, False, 0.0, -signal.SIGTERM),
], ids=["ctrl-c-at-spawn", "ctrl-c-while-the-front-end-imports", "ctrl-c-while-loading", "hang-up-at-spawn",
        "kill-hup", "kill-term"])
def test_a_signal_while_starting_stops_everything_cleanly(sig, to_group, delay, expected):
    proc = _start("--devices", "cpu", port=free_port())
    try:
        engine = _engine_child(proc.pid)
        segments = mapped_shared_memory(session_members(proc.pid))  # the engine's, made before it started
        deadline = time.monotonic() + delay
        while time.monotonic() < deadline:
            segments |= mapped_shared_memory(session_members(proc.pid))
            time.sleep(0.05)
        assert segments
        (os.killpg if to_group else os.kill)(proc.pid, sig)
        signalled = time.monotonic()
        left: list = []
        sampler = threading.Thread(target=_sample_left, args=(proc, engine, signalled, left), daemon=True)
        sampler.start()  # beside communicate, which keeps the server's pipes drained
        out, err = proc.communicate(timeout=20)
        stopped_in = time.monotonic() - signalled
        sampler.join(1)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert "Traceback" not in out + err, err
    assert proc.returncode == expected, err
    assert stopped_in < 10, (err, left)
    assert not _none_left(proc.pid), [command_line(pid) for pid in session_members(proc.pid)]
    assert not is_alive(engine)
    assert not segments & shared_memory()  # whatever it had mapped is unlinked
