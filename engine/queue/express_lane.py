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
overhead stays within a fifteenth of the time, and queries that arrive meanwhile wait for the
lane's next run or for the batch's end. Between two batches, the small requests that wait beside
larger ones go first, as a batch of their own (`cut_between_batches`): taken into the next large
batch, they would wait for all of it.

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
        self._went_between = False  # the latest batch was cut_between_batches'

    @contextmanager
    def interrupting(self, batch: Batch) -> Iterator[None]:
        """While `batch` computes (on the CPU, inside its launch), the lane may run between its layers."""
        before = self._may_interrupt
        self._may_interrupt = any(not s.piece.message.is_small for s in batch.slices)
        try:
            yield
        finally:
            self._may_interrupt = before

    def cut_between_batches(self) -> Batch | None:
        """Between two batches: the small requests that wait beside larger ones, as a batch of their own.
        Taken into the next large batch, a query would wait for all of it; alone, it costs little more
        than its own tokens."""
        if not self.is_on or self._went_between or not self.loop.queue.holds_large:
            self._went_between = False  # never two in a row: a stream of queries cannot hold the larger ones
            return None
        batch = self.loop.queue.cut_small()
        if batch is not None:
            self._went_between = True
            self.loop.board.add("express_batches", 1)
        return batch

    def __call__(self) -> None:
        """Between two layers of the batch in flight."""
        loop = self.loop
        if (self.is_running or not self._may_interrupt or not loop.front_ends
                or time.monotonic() - self._last_run < self.min_interval):
            return
        ready = wait(list(loop.front_ends), 0)
        if not ready:
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
