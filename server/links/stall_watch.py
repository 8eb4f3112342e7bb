"""When an engine counts as wedged: work waits on it, and no batch has finished for longer than
a bound derived from the batches it has run.

A hung kernel, a process stopped by SIGSTOP, a deadlock: the engine neither dies nor answers.
Each front end's watchdog (server/links/engine_links.py) asks every second how long the engine has
owed it a sign of life: since the later of its current batch's start or its latest batch's end
(the engine's board), and, where this front end has pieces there, since it last heard from it.
An engine with nothing to do owes nothing, however long it idles. Past the bound the engine is
killed and the supervisor restarts it (server/processes/engine_keeper.py).

The bound is the longer of STALL_FACTOR times the longest batch the engine has run and
FULL_BATCH_FACTOR times what a full batch would take at its recent speed (a CPU engine that has
only seen short requests must not be judged by them when the first full batch comes), so that a
device that computes a full batch in 50 ms is not given two minutes; never less than the floor
(a CUDA graph captured on the way, a loaded machine), never more than the ceiling
(`--engine-stall-timeout`, the longest any batch may run). An engine that has run no batch yet
gives nothing to judge by: the ceiling holds.
"""

from __future__ import annotations

STALL_FACTOR = 10.0
FULL_BATCH_FACTOR = 3.0


def stall_bound(longest_batch_s: float, tokens_per_second: float, max_batch_tokens: int | None, floor_s: float,
                ceiling_s: float) -> float:
    """Seconds of silence after which an engine with work counts as wedged. `tokens_per_second`:
    its speed while it computes, over its recent batches (0: it has run none); `max_batch_tokens`:
    a full batch's tokens (None: not known here, the longest batch alone counts)."""
    if tokens_per_second <= 0:
        return ceiling_s
    full_batch_s = (max_batch_tokens or 0) / tokens_per_second
    return min(ceiling_s, max(floor_s, STALL_FACTOR * longest_batch_s, FULL_BATCH_FACTOR * full_batch_s))


def silent_for(busy_since: float, last_batch_end: float, heard_at: float, has_pending: bool, now: float) -> float:
    """Seconds the engine has owed a sign of life and given none; 0 while it owes none.
    `busy_since`, `last_batch_end`: off its board (time.monotonic(), 0 for never or idle);
    `heard_at`: when this front end last heard from it, which counts where it has pieces there."""
    if not busy_since and not has_pending:
        return 0.0
    return max(0.0, now - max(busy_since, last_batch_end, heard_at if has_pending else 0.0))
