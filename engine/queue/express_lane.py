"""The express lane: on the CPU, small requests that arrive while a batch computes run between its layers.

A CPU computes a batch inside its launch, on the engine's thread, for as long as the batch
takes: a one-text query that arrives meanwhile would wait for all of it, then for its own
batch. So, on the CPU, the model calls the lane after each of its layers (ModelRunner's
`interleave`): the lane reads what the front ends have sent since (without blocking), and
if requests marked small (a few hundred tokens at most: the front end says so) wait, it
runs them as a batch of their own at once, answers them, and lets the larger batch go on
from the layer where it stopped. A query then waits for one layer of the batch in flight,
not for the whole batch, and the large batches stay large (their overhead stays small).

Every batch costs a fixed overhead beyond its tokens (measured at warm-up,
engine/rose/batch_budget.py): a lane run for each query of a steady stream would spend the
device's time on it. So the lane runs at most once every MIN_INTERVAL_OVERHEADS overheads: its
overhead stays within a fifteenth of the time, and queries that arrive meanwhile wait for its
next run. While larger requests wait, the batches between the lane's runs leave the small ones
out (`cut`): taken into a large batch, a query would wait for all of it, longer than the
lane's interval, and the lane carries the queries of a whole interval in one run. Its run comes
at the first layer's end past the interval, or before the next batch.

The lane's batch runs on the engine's thread alone (see `_one_thread`). Only a batch that
holds a larger request is interrupted: one of small requests alone takes little longer than
the lane's own batch would, and the next one takes what arrived meanwhile.

Everything here runs on the engine's thread, inside the launch of the batch in flight: the
lane never runs inside itself, and a front end that says goodbye meanwhile is closed only
once that batch is handed on (engine/queue/engine_loop.py defers it).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection, wait
from typing import Any, Protocol

from rose_embed.engine.queue.piece_queue import Batch, PieceQueue


class _Loop(Protocol):
    """What the lane uses of engine/queue/engine_loop.py's EngineLoop."""

    front_ends: dict[Connection, Any]
    queue: PieceQueue
    board: Any  # engine/contract/board.py's EngineBoard
    num_in_flight: int
    wake_reader: Connection

    def on_messages(self, front_end: Any) -> None: ...

    def launch(self, batch: Batch) -> None: ...

    def on_landed(self) -> None: ...


# The lane's runs are at least this many batch overheads apart: its overhead is a fifteenth of the time.
MIN_INTERVAL_OVERHEADS = 15
# Where warm-up measured no overhead (a test's fake engine): the overhead assumed.
DEFAULT_OVERHEAD_S = 0.005
# A warm-up on a busy machine can measure a batch's overhead many times too long: past this the
# lane's runs would be too far apart for a query's sake.
MAX_OVERHEAD_S = 0.008


@contextmanager
def _one_thread() -> Iterator[None]:
    """The lane's small batch on this thread alone: each of its many short operations would otherwise
    wait at a barrier for torch's other threads, which a busy machine (the front ends, the clients)
    leaves unscheduled for milliseconds at a time: hundreds of milliseconds for a batch of one query."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class ExpressLane:
    def __init__(self, loop: _Loop, overhead_seconds: float | None = None, is_on: bool = True):
        """`overhead_seconds`: what any batch costs beyond its tokens, as warm-up measured it; `is_on`: the
        loop computes on the CPU with fair scheduling (elsewhere the lane stays idle)."""
        self.loop = loop
        self.is_on = is_on
        self.is_running = False
        self.min_interval = MIN_INTERVAL_OVERHEADS * min(overhead_seconds or DEFAULT_OVERHEAD_S, MAX_OVERHEAD_S)
        self._last_run = float("-inf")
        self._may_interrupt = False  # the batch in flight holds a larger request

    @contextmanager
    def interrupting(self, batch: Batch) -> Iterator[None]:
        """While `batch` computes (on the CPU, inside its launch), the lane may run between its layers."""
        before = self._may_interrupt
        self._may_interrupt = any(not s.piece.message.is_small for s in batch.slices)
        try:
            yield
        finally:
            self._may_interrupt = before

    def cut(self) -> Batch | None:
        """The next batch. While larger requests wait, the small ones are the lane's: taken into the next
        large batch, a query would wait for all of it. So they go first, as a batch of their own, if the
        lane's interval has passed, and otherwise stay queued for its next run (between this batch's
        layers, or before the next batch)."""
        queue = self.loop.queue
        if not self.is_on or not queue.holds_large:
            return queue.cut()
        if time.monotonic() - self._last_run >= self.min_interval and (batch := self._cut_small()) is not None:
            return batch
        # Where no larger request can go now (their rows are taken), the small ones need not wait.
        return queue.cut(skip_small=True) or self._cut_small()

    def _cut_small(self) -> Batch | None:
        batch = self.loop.queue.cut_small()
        if batch is not None:
            self._last_run = time.monotonic()
            self.loop.board.add("express_batches", 1)
        return batch

    def __call__(self) -> None:
        """Between two layers of the batch in flight."""
        loop = self.loop
        if (self.is_running or not self._may_interrupt or not loop.front_ends
                or time.monotonic() - self._last_run < self.min_interval):
            return
        ready = wait(list(loop.front_ends), 0)
        if not ready and not loop.queue.holds_small:  # small ones left out of this batch wait for this run
            return
        self.is_running = True
        try:
            for conn in ready:
                if conn in loop.front_ends:
                    loop.on_messages(loop.front_ends[conn])
            while (batch := loop.queue.cut_small()) is not None:
                in_flight = loop.num_in_flight
                with _one_thread():
                    loop.launch(batch)  # computed now, on this thread; the readback thread writes its rows
                while loop.num_in_flight > in_flight:  # answered before the larger batch goes on
                    wait([loop.wake_reader])
                    loop.on_landed()
                loop.board.add("express_batches", 1)
                self._last_run = time.monotonic()
        finally:
            self.is_running = False
