"""The express lane: on the CPU, small requests that arrive while a batch computes run between its layers;
on a GPU, batches shrink to the express budget while they come.

A CPU computes a batch inside its launch, on the engine's thread, for as long as the batch
takes: a one-text query that arrives meanwhile would wait for all of it, then for its own
batch. So, on the CPU, the model calls the lane after each of its layers (ModelRunner's
`interleave`): the lane reads what the front ends have sent since (without blocking), and
if requests marked small (a few hundred tokens at most: the front end says so) wait, it
runs them as a batch of their own at once, answers them, and lets the larger batch go on
from the layer where it stopped. A query then waits for one layer of the batch in flight,
not for the whole batch, and the large batches stay large (their overhead stays small).

A run costs more than its tokens (a small batch computes less efficiently, on one thread): a run
for each query of a steady stream would spend the engine's time on it. So the lane paces itself:
after a run of d seconds the next waits d * (1 - LANE_SHARE) / LANE_SHARE, and its runs take at
most LANE_SHARE of the engine's time while larger requests wait, whatever the machine's speed
and the queries' rate (more queries make longer runs, further apart, each carrying more of
them). The share sets the trade: a larger one answers queries sooner and leaves the bulk
requests less. Queries that arrive meanwhile wait for the next run: while larger requests
wait, the batches between the lane's runs leave the small ones out (`cut`), since taken into a
large batch a query would wait for all of it. The next run comes at the first layer's end past
the pause, or before the next batch.

The lane's batch runs on the engine's thread alone (see `_one_thread`). Only a batch that
holds a larger request is interrupted: one of small requests alone takes little longer than
the lane's own batch would, and the next one takes what arrived meanwhile.

On a GPU a batch runs whole, as a CUDA graph, and nothing runs between its layers. There the lane
keeps queries from waiting for large batches instead: where warm-up gave an express budget
(engine/rose/batch_budget.py: a large model's), a batch cut while small requests wait beside larger
ones is held to it, the queries first and the larger requests filling the rest, so a query waits
for a batch of about its own cost. So too while queries came or waited within one full batch's
time, though none waits now: the next is likely to arrive while this batch computes, and would wait
for all of a full one. (A sequence longer than that budget still goes, alone, as into any empty
batch: PieceQueue._take.)

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

    def full_batch_seconds(self) -> float: ...


# The most of the engine's time the lane's runs take while larger requests wait: the rest is theirs.
LANE_SHARE = 0.4


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
    def __init__(self, loop: _Loop, is_on: bool = True, budget_tokens: int = 0):
        """`is_on`: the loop computes on the CPU with fair scheduling (elsewhere the lane stays idle).
        `budget_tokens`: a GPU's express budget, with fair scheduling (0: none)."""
        self.loop = loop
        self.is_on = is_on
        self.budget_tokens = budget_tokens
        self._small_seen = float("-inf")  # when a small request's piece last came or waited (time.monotonic())
        self.is_running = False
        self.next_run = float("-inf")  # the lane's pace: no run before this (time.monotonic())
        self._may_interrupt = False  # the batch in flight holds a larger request
        self._between: Batch | None = None  # the lane's batch cut between two batches, until it has run

    @contextmanager
    def interrupting(self, batch: Batch) -> Iterator[None]:
        """While `batch` computes (on the CPU, inside its launch), the lane may run between its layers."""
        before, started = self._may_interrupt, time.monotonic()
        self._may_interrupt = any(not s.piece.message.is_small for s in batch.slices)
        try:
            yield
        finally:
            self._may_interrupt = before
            if batch is self._between:  # the lane's own run, cut between two batches
                self._between = None
                self._paced(started)

    def saw_small(self) -> None:
        """A small request's piece has come."""
        self._small_seen = time.monotonic()

    def cut(self) -> Batch | None:
        """The next batch. While larger requests wait, the small ones are the lane's: taken into the next
        large batch, a query would wait for all of it. So they go first, as a batch of their own, if the
        lane's pace allows a run, and otherwise stay queued for its next run (between this batch's
        layers, or before the next batch). On a GPU with an express budget, a batch held to it."""
        queue = self.loop.queue
        if self.budget_tokens and queue.holds_large:
            now = time.monotonic()
            if queue.holds_small:
                self._small_seen = now
            if now - self._small_seen < self.loop.full_batch_seconds():
                return queue.cut(max_tokens=self.budget_tokens)
        if not self.is_on or not queue.holds_large:
            return queue.cut()
        if time.monotonic() >= self.next_run and (batch := self._cut_small()) is not None:
            return batch
        # Where no larger request can go now (their rows are taken), the small ones need not wait.
        return queue.cut(skip_small=True) or self._cut_small()

    def _cut_small(self) -> Batch | None:
        self._between = self.loop.queue.cut_small()
        if self._between is not None:
            self.loop.board.add("express_batches", 1)
        return self._between

    def _paced(self, started: float) -> None:
        """A run that began at `started` has ended: the next waits in proportion to it."""
        now = time.monotonic()
        self.next_run = now + (now - started) * (1 - LANE_SHARE) / LANE_SHARE

    def __call__(self) -> None:
        """Between two layers of the batch in flight."""
        loop = self.loop
        if self.is_running or not self._may_interrupt or not loop.front_ends or time.monotonic() < self.next_run:
            return
        ready = wait(list(loop.front_ends), 0)
        if not ready and not loop.queue.holds_small:  # small ones left out of this batch wait for this run
            return
        self.is_running, started, ran = True, time.monotonic(), False
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
                ran = True
        finally:
            self.is_running = False
            if ran:
                self._paced(started)
