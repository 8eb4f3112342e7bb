"""When an engine counts as wedged: work waits on it, and no batch has finished for longer than
a bound derived from the longest batch it has run.

A hung kernel, a process stopped by SIGSTOP, a deadlock: the engine neither dies nor answers.
Each front end's watchdog (server/engine_links.py) asks every second how long the engine has
owed it a sign of life: since the later of its current batch's start or its latest batch's end
(the engine's board), and, where this front end has pieces there, since it last heard from it.
An engine with nothing to do owes nothing, however long it idles. Past the bound the engine is
killed and the supervisor restarts it (server/engine_keeper.py).

The bound is STALL_FACTOR times the longest batch the engine has run, so that a device that
computes a full batch in 50 ms is not given two minutes; never less than the floor (a first
batch of a new size, a CUDA graph captured on the way, a loaded machine), never more than the
ceiling (`--engine-stall-timeout`, the longest any batch may run).
"""

from __future__ import annotations

STALL_FACTOR = 10.0


def stall_bound(longest_batch_s: float, floor_s: float, ceiling_s: float) -> float:
    """Seconds of silence after which an engine with work counts as wedged."""
    return min(ceiling_s, max(floor_s, STALL_FACTOR * longest_batch_s))


def silent_for(busy_since: float, last_batch_end: float, heard_at: float, has_pending: bool, now: float) -> float:
    """Seconds the engine has owed a sign of life and given none; 0 while it owes none.
    `busy_since`, `last_batch_end`: off its board (time.monotonic(), 0 for never or idle);
    `heard_at`: when this front end last heard from it, which counts where it has pieces there."""
    if not busy_since and not has_pending:
        return 0.0
    return max(0.0, now - max(busy_since, last_batch_end, heard_at if has_pending else 0.0))
