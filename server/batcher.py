"""The batcher: one asyncio task, first come first served, batches cut by a token budget.

Each input of a request is its own entry, so batches form across requests. While one
batch computes on the engine thread, the next is cut and packed, and waits its turn.

With several engines (one process per device, server/engine_links.py) the same one task
feeds them all: each batch goes to the least-loaded engine (fewest tokens in flight),
each engine holding up to `max_batches_in_flight` batches. An engine that dies fails
only its own batches and leaves the rotation; only when none is left is the whole
server unavailable.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from engine.rose.batch import pack
from engine.batch_outcomes import BatchFailedError, BatchRecord, EngineUnavailableError, QueueFullError
from server.replica import LocalReplica, Replica, ReplicaLostError

if TYPE_CHECKING:
    from engine.rose.engine import Engine
    from server.engine_links import EngineLinks

logger = logging.getLogger("rose_embed.batcher")


@dataclass
class _Entry:
    ids: np.ndarray
    future: asyncio.Future
    owner: object  # who asked (a request id), recorded in the batch log for observability
    segment_ids: np.ndarray | None = None  # a late-chunked window's segments (engine/rose/batch.py's pack)
    num_outputs: int = 1  # vectors it pools: 1, or its segments


@dataclass(eq=False)
class _Running:
    """A batch handed to an engine; `started` is set when the engine picks it up (None: still waiting)."""

    entries: list[_Entry]
    replica: Replica
    started: float | None = None


class Batcher:
    """Owns the queue; resolves each entry's future with its vector (float32 [dim]), or with
    its segments' vectors (float32 [segments, dim]) for an entry submitted with segments.

    `max_batch_seqs` caps the vectors a batch pools (its sequences, or their segments).

    `engine` is EngineLinks (its `replicas`, one engine process each: the server) or an
    in-process Engine (computed by one thread of this process: tests and embedding programs).
    `max_batches_in_flight` is per replica.
    """

    def __init__(
        self,
        engine: Engine | EngineLinks,
        max_batch_tokens: int,
        max_batch_seqs: int,
        max_queued_tokens: int | None = None,
        max_batches_in_flight: int = 2,
        batch_log_size: int = 1024,
    ):
        if max_batch_tokens < engine.spec.max_seq_len:
            raise ValueError(
                f"the batch token budget ({max_batch_tokens}) must be at least the model's "
                f"max sequence length ({engine.spec.max_seq_len})"
            )
        self.engine = engine
        self.max_batch_tokens, self.max_batch_seqs = max_batch_tokens, max_batch_seqs
        self.max_queued_tokens = max_queued_tokens
        self.max_batches_in_flight = max_batches_in_flight
        self.batch_log: collections.deque[BatchRecord] = collections.deque(maxlen=batch_log_size)
        self._queue: collections.deque[_Entry] = collections.deque()
        self._queued_tokens = 0
        self._wake = asyncio.Event()
        self._room = asyncio.Event()  # set whenever a replica may have room for one more batch
        group = getattr(engine, "replicas", None)
        # The local engine's threads are the batcher's to stop; engine processes are their group's.
        self._owned: list[Replica] = [] if group is not None else [LocalReplica(engine)]
        self.replicas: list[Replica] = list(group) if group is not None else self._owned
        self._task: asyncio.Task | None = None
        self._in_flight: set[asyncio.Task] = set()
        self._running: set[_Running] = set()
        # Set once the engine can compute nothing more (its thread died, or the batcher task did).
        self.fatal_error: str | None = None
        # Called on the event loop with each successful batch's record (metrics, request timing).
        self.listeners: list[Callable[[BatchRecord], None]] = []
        self.num_cancelled_inputs = 0  # inputs dropped unrun: their request was cancelled (client gone, timeout)
        self.num_failed_batches = 0

    @property
    def queued_tokens(self) -> int:
        return self._queued_tokens

    @property
    def queued_inputs(self) -> int:
        return len(self._queue)

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        for replica in self.replicas:
            replica.attach(loop, self._on_replica_lost)
        self._task = loop.create_task(self._run(), name="rose-batcher")
        self._task.add_done_callback(self._on_task_done)
        if not any(r.is_serving for r in self.replicas):  # one died between its start and now
            self._on_replica_lost(self.replicas[0])

    def _on_replica_lost(self, replica: Replica) -> None:
        """On the event loop, once per replica that goes out (dead, or retired as stuck)."""
        serving = [r for r in self.replicas if r.is_serving]
        if len(self.replicas) > 1:
            logger.error("engine %d on %s is out of rotation: %s; %d of %d engines serve on", replica.index,
                         replica.device, replica.out_reason, len(serving), len(self.replicas))
        self._room.set()
        if not serving and self.fatal_error is None:
            self.fatal_error = replica.out_reason if len(self.replicas) == 1 else "every engine is out (" + "; ".join(
                f"engine {r.index} on {r.device}: {r.out_reason}" for r in self.replicas) + ")"
            self.fail_pending(EngineUnavailableError(self.fatal_error))

    def _on_task_done(self, task: asyncio.Task) -> None:
        # A batcher that died of a bug would leave every queued request waiting for ever.
        if not task.cancelled() and task.exception() is not None:
            self.fatal_error = f"the batcher stopped ({type(task.exception()).__name__})"
            self.fail_pending(EngineUnavailableError(self.fatal_error))

    async def stop(self, timeout: float | None = None) -> None:
        """Stop batching; wait up to `timeout` s for batches in flight (a stuck engine is left behind)."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            except Exception:  # the batcher died earlier; _on_task_done recorded it
                pass
        if self._in_flight:
            await asyncio.wait(set(self._in_flight), timeout=timeout)
        for entry in self._queue:
            if not entry.future.done():
                entry.future.cancel()
        self._queue.clear()
        for replica in self._owned:
            # Joining a thread stuck in a kernel would hang the shutdown for ever.
            replica.shutdown(wait=not self._running)

    def stalled_seconds(self) -> float:
        """How long the oldest batch has been on an engine that cannot be retired (the local
        engine thread) without its vectors coming back; stuck engine processes are retired
        instead (see `retire_stalled`)."""
        now = time.perf_counter()
        return max((now - r.started for r in list(self._running)
                    if r.started is not None and not r.replica.can_retire and r.replica.is_serving), default=0.0)

    def retire_stalled(self, timeout: float) -> None:
        """Take every engine process whose batch has run longer than `timeout` s out of rotation."""
        now = time.perf_counter()
        for running in list(self._running):
            replica = running.replica
            if replica.can_retire and replica.is_serving and running.started is not None \
                    and now - running.started > timeout:
                replica.retire(f"stuck: a batch ran for {now - running.started:.1f} s")

    def fail_pending(self, error: BaseException) -> None:
        """Fail every queued and computing input with `error` (the engine cannot serve them)."""
        for entry in self._queue:
            if not entry.future.done():
                entry.future.set_exception(error)
        self._queue.clear()
        self._queued_tokens = 0
        for running in list(self._running):
            _fail(running.entries, error)

    def submit(self, seqs: list[np.ndarray], owner: object = None,
               segments: list[np.ndarray] | None = None) -> list[asyncio.Future]:
        """Queue one request's inputs; each future resolves to that input's vector.

        `segments`: per input, its tokens' segment ids (numbered from 0, -1 for none, as
        engine/rose/batch.py's pack takes them); each future then resolves to the input's
        segments' vectors [num_segments, dim]. At most max_batch_seqs segments per input.
        """
        tokens = sum(len(s) for s in seqs)
        if self.fatal_error is not None:
            raise EngineUnavailableError(self.fatal_error)
        if self.max_queued_tokens is not None and self._queued_tokens + tokens > self.max_queued_tokens and self._queue:
            raise QueueFullError(retry_after=self._retry_after_estimate())
        counts = [1] * len(seqs) if segments is None else [int(ids.max()) + 1 for ids in segments]
        if max(counts, default=1) > self.max_batch_seqs:
            raise ValueError(f"an input pools {max(counts)} vectors, more than a batch holds ({self.max_batch_seqs})")
        loop = asyncio.get_running_loop()
        futures = []
        for i, ids in enumerate(seqs):
            future = loop.create_future()
            self._queue.append(_Entry(ids, future, owner, None if segments is None else segments[i], counts[i]))
            futures.append(future)
        self._queued_tokens += tokens
        self._wake.set()
        return futures

    def _retry_after_estimate(self) -> int:
        recent = list(self.batch_log)[-16:]
        seconds = sum(r.compute_seconds for r in recent)
        tokens = sum(r.num_tokens for r in recent)
        rate = tokens / seconds if seconds > 0 else 0.0
        return int(min(60, max(1, self._queued_tokens / rate))) if rate else 1

    def _cut(self) -> list[_Entry]:
        entries, tokens, outputs = [], 0, 0
        while self._queue:
            entry = self._queue[0]
            if entry.future.done():  # the client went away (cancelled) before compute
                self._queue.popleft()
                self._queued_tokens -= len(entry.ids)
                self.num_cancelled_inputs += 1
                continue
            if entries and (tokens + len(entry.ids) > self.max_batch_tokens
                            or outputs + entry.num_outputs > self.max_batch_seqs):
                break
            self._queue.popleft()
            self._queued_tokens -= len(entry.ids)
            entries.append(entry)
            tokens += len(entry.ids)
            outputs += entry.num_outputs
        return entries

    def least_loaded(self) -> Replica | None:
        """The serving replica with room and the fewest tokens in flight (None: all busy or out)."""
        ready = [r for r in self.replicas
                 if r.is_serving and r.num_in_flight < self.max_batches_in_flight and r.has_room()]
        return min(ready, key=lambda r: (r.tokens_in_flight, r.num_in_flight, r.index), default=None)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            # A batch is cut only once an engine can take it, so that it holds all that has queued.
            while self.least_loaded() is None:
                self._room.clear()
                await self._room.wait()
            entries: list[_Entry] = []
            while not entries:
                await self._wake.wait()
                entries = self._cut()
                if not self._queue:
                    self._wake.clear()
            replica = self.least_loaded()
            if replica is None:  # the engine with room went out while the batch was cut
                if self.fatal_error is not None:
                    _fail(entries, EngineUnavailableError(self.fatal_error))
                else:
                    self._requeue(entries)
                continue
            # Counted now, not in the task, so that the next batch already sees this one's load.
            num_tokens = sum(len(e.ids) for e in entries)
            replica.num_in_flight += 1
            replica.tokens_in_flight += num_tokens
            task = loop.create_task(self._process(entries, replica, num_tokens))
            self._in_flight.add(task)
            task.add_done_callback(self._in_flight.discard)

    def _requeue(self, entries: list[_Entry]) -> None:
        """Put a cut batch back at the head of the queue, in order."""
        self._queue.extendleft(reversed(entries))
        self._queued_tokens += sum(len(e.ids) for e in entries)
        self._wake.set()

    async def _process(self, entries: list[_Entry], replica: Replica, num_tokens: int) -> None:
        running = _Running(entries, replica)
        self._running.add(running)
        try:
            if self.fatal_error is not None:
                raise EngineUnavailableError(self.fatal_error)
            batch = pack([e.ids for e in entries], [e.segment_ids for e in entries])
            vectors = await replica.compute(batch, running)
            if vectors is None:
                self.num_cancelled_inputs += sum(e.future.cancelled() for e in entries)
                return
            finished = time.perf_counter()
            started = running.started if running.started is not None else finished
            record = BatchRecord(batch.num_seqs, batch.num_tokens, tuple(e.owner for e in entries),
                                 finished - started, started, finished, replica.index)
            self.batch_log.append(record)
            replica.num_batches += 1
            replica.num_tokens += batch.num_tokens
        except asyncio.CancelledError:
            raise
        except EngineUnavailableError as exc:
            _fail(entries, exc)
        except ReplicaLostError as exc:
            # The replica told the batcher already (_on_replica_lost); these inputs were on it.
            if self.fatal_error is not None:
                error = EngineUnavailableError(self.fatal_error)
            else:  # the others serve on: a retry of the request succeeds
                error = BatchFailedError(f"the engine computing the batch went out ({exc})")
                error.__cause__ = exc
                self.num_failed_batches += 1
            _fail(entries, error)
        except Exception as exc:
            error = BatchFailedError(f"computing the batch failed ({type(exc).__name__})")
            error.__cause__ = exc
            self.num_failed_batches += 1
            _fail(entries, error)
        else:
            first = 0
            for entry in entries:
                if not entry.future.done():
                    # An entry of segments gets its rows; an ordinary one its one row, as a vector.
                    rows = vectors[first : first + entry.num_outputs]
                    entry.future.set_result(rows if entry.segment_ids is not None else rows[0])
                first += entry.num_outputs
            for listener in self.listeners:
                listener(record)
        finally:
            self._running.discard(running)
            replica.num_in_flight -= 1
            replica.tokens_in_flight -= num_tokens
            self._room.set()


def _fail(entries: list[_Entry], error: BaseException) -> None:
    for entry in entries:
        if not entry.future.done():
            entry.future.set_exception(error)
