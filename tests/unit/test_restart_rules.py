"""The rules behind a self-healing engine, each on its own: how often and how soon a dead engine
is restarted (server/processes/restart_policy.py), when a silent one counts as wedged (server/links/stall_watch.py),
and what of /dev/shm a dead server left for the next start to remove (server/processes/stale_memory.py)."""

from __future__ import annotations

import os
import subprocess
import sys

from rose_embed.engine.contract.owner_lock import hold_path
from rose_embed.engine.contract.shared_blocks import BLOCK_PREFIX
from rose_embed.server.processes.restart_policy import RestartPolicy
from rose_embed.server.processes.stale_memory import remove_stale
from rose_embed.server.links.stall_watch import silent_for, stall_bound
from rose_embed.server.metrics.stats_board import BOARD_PREFIX


class _Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_restarts_back_off_and_stop_at_the_limit_within_the_window():
    clock = _Clock()
    policy = RestartPolicy(4, 60.0, clock)
    delays = []
    for _ in range(5):
        delays.append(policy.next_delay())
        clock.now += 1.0
    assert delays == [0.0, 1.0, 2.0, 4.0, None]
    clock.now += 60.0  # the earlier deaths have left the window
    assert policy.next_delay() == 0.0 and policy.num_recent == 1


def test_no_restarts_allowed_gives_up_at_the_first_death():
    assert RestartPolicy(0, 600.0).next_delay() is None


def test_the_stall_bound_follows_the_batches_between_floor_and_ceiling():
    fast = 1e6  # tokens per second: a full batch of 16384 tokens in 16 ms
    assert stall_bound(0.05, fast, 16384, 30.0, 120.0) == 30.0  # fast batches: the floor
    assert stall_bound(5.0, fast, 16384, 30.0, 120.0) == 50.0  # ten times the longest batch
    assert stall_bound(60.0, fast, 16384, 30.0, 120.0) == 120.0  # never past --engine-stall-timeout
    # Short batches only, on a CPU at 1,000 tokens/s: a full batch would take 16 s, allowed three times over.
    assert stall_bound(0.05, 1000.0, 16384, 30.0, 120.0) == 3 * 16.384
    assert stall_bound(0.05, 0.0, 16384, 30.0, 120.0) == 120.0  # no batch run yet: nothing to judge by
    assert stall_bound(0.0, 0.0, None, 30.0, 2.0) == 2.0


def test_an_engine_is_silent_only_while_it_owes_work():
    now = 500.0
    assert silent_for(0.0, 100.0, 0.0, False, now) == 0.0  # idle for minutes: owes nothing
    assert silent_for(490.0, 100.0, 0.0, False, now) == 10.0  # a batch on the device for 10 s
    assert silent_for(490.0, 497.0, 0.0, False, now) == 3.0  # ... though another just finished
    # Stopped between batches: nothing on the device, this front end's pieces unanswered since 496.
    assert silent_for(0.0, 100.0, 496.0, True, now) == 4.0


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_only_what_dead_servers_left_unlocked_is_removed(tmp_path):
    dead = _dead_pid()
    stale_block = tmp_path / f"{BLOCK_PREFIX}{dead}-0badf00d"
    stale_board = tmp_path / f"{BOARD_PREFIX}{dead}-ab_12cd3"
    live_block = tmp_path / f"{BLOCK_PREFIX}{os.getpid()}-0badf00d"  # this process is alive
    # Named after a process this PID namespace does not see, but locked: a live server elsewhere.
    foreign_block = tmp_path / f"{BLOCK_PREFIX}{dead}-feedf00d"
    other = tmp_path / "someone-elses-12345-block"
    for path in (stale_block, live_block, foreign_block, other):
        path.write_bytes(b"\0" * 64)
    stale_board.mkdir()
    (stale_board / "frontend-0.json").write_text("{}")
    lock = hold_path(str(foreign_block))
    try:
        removed = remove_stale(tmp_path)
    finally:
        os.close(lock)
    assert sorted(removed) == sorted([stale_block.name, stale_board.name])
    assert not stale_block.exists() and not stale_board.exists()
    assert live_block.exists() and foreign_block.exists() and other.exists()
