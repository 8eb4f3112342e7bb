"""The batcher: one asyncio task, first come first served, batches cut by a token budget.

Each input of a request is its own entry, so batches form across requests. While one
batch computes on the engine thread, the next is cut and packed, and waits its turn.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from engine.batch import pack
from engine.engine import Engine


class QueueFullError(RuntimeError):
    """The queue holds more tokens than allowed; the caller should retry later."""

    def __init__(self, retry_after: int):
        super().__init__(f"the server is busy; retry in {retry_after} s")
        self.retry_after = retry_after


class BatchFailedError(RuntimeError):
    """Computing the batch that held this input failed; other batches are unaffected."""


class EngineUnavailableError(RuntimeError):
    """The engine thread died or is stuck: nothing can be computed until it recovers or restarts."""


@dataclass
class _Entry:
    ids: np.ndarray
    future: asyncio.Future
    owner: object  # who asked (a request id), recorded in the batch log for observability


@dataclass(frozen=True)
class BatchRecord:
    """What one executed batch held; kept for tests and metrics."""

    num_seqs: int
    num_tokens: int
    owners: tuple
    compute_seconds: float  # from the engine thread picking the batch up to its vectors on the host
    started: float = 0.0  # time.perf_counter() when the engine thread picked it up
    finished: float = 0.0


@dataclass(eq=False)
class _Running:
    """A batch handed to the engine; `started` is set by the engine thread (None: still waiting)."""

    entries: list[_Entry]
    started: float | None = None


def cut_batches(lengths: list[int], max_tokens: int, max_seqs: int) -> list[tuple[int, int]]:
    """Split a sequence of lengths, in order, into [lo, hi) ranges within both caps."""
    ranges, lo, tokens = [], 0, 0
    for i, n in enumerate(lengths):
        if i > lo and (tokens + n > max_tokens or i - lo >= max_seqs):
            ranges.append((lo, i))
            lo, tokens = i, 0
        tokens += n
    if lo < len(lengths):
        ranges.append((lo, len(lengths)))
    return ranges


class Batcher:
    """Owns the queue; resolves each entry's future with its vector (float32 [dim])."""

    def __init__(
        self,
        engine: Engine,
        max_batch_tokens: int,
        max_batch_seqs: int,
        max_queued_tokens: int | None = None,
        max_batches_in_flight: int = 2,
        batch_log_size: int = 1024,
    ):
        if max_batch_tokens < engine.spec.max_seq_len:
            raise ValueError(
                f"--max-batch-tokens ({max_batch_tokens}) must be at least the model's "
                f"max sequence length ({engine.spec.max_seq_len})"
            )
        self.engine = engine
        self.max_batch_tokens, self.max_batch_seqs = max_batch_tokens, max_batch_seqs
        self.max_queued_tokens = max_queued_tokens
        self.batch_log: collections.deque[BatchRecord] = collections.deque(maxlen=batch_log_size)
        self._queue: collections.deque[_Entry] = collections.deque()
        self._queued_tokens = 0
        self._wake = asyncio.Event()
        self._slots = asyncio.Semaphore(max_batches_in_flight)
        # One thread drives the device; another waits for results to land on the host.
        self._engine_thread = ThreadPoolExecutor(1, thread_name_prefix="rose-engine")
        self._readback_thread = ThreadPoolExecutor(1, thread_name_prefix="rose-readback")
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
        self._task = asyncio.get_running_loop().create_task(self._run(), name="rose-batcher")
        self._task.add_done_callback(self._on_task_done)

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
        # Joining a thread stuck in a kernel would hang the shutdown for ever.
        self._engine_thread.shutdown(wait=not self._running)
        self._readback_thread.shutdown(wait=not self._running)

    def stalled_seconds(self) -> float:
        """How long the oldest batch has been on the engine without its vectors coming back."""
        now = time.perf_counter()
        return max((now - r.started for r in list(self._running) if r.started is not None), default=0.0)

    def fail_pending(self, error: BaseException) -> None:
        """Fail every queued and computing input with `error` (the engine cannot serve them)."""
        for entry in self._queue:
            if not entry.future.done():
                entry.future.set_exception(error)
        self._queue.clear()
        self._queued_tokens = 0
        for running in list(self._running):
            _fail(running.entries, error)

    def submit(self, seqs: list[np.ndarray], owner: object = None) -> list[asyncio.Future]:
        """Queue one request's inputs; each future resolves to that input's vector."""
        tokens = sum(len(s) for s in seqs)
        if self.fatal_error is not None:
            raise EngineUnavailableError(self.fatal_error)
        if self.max_queued_tokens is not None and self._queued_tokens + tokens > self.max_queued_tokens and self._queue:
            raise QueueFullError(retry_after=self._retry_after_estimate())
        loop = asyncio.get_running_loop()
        futures = []
        for ids in seqs:
            future = loop.create_future()
            self._queue.append(_Entry(ids, future, owner))
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
        entries, tokens = [], 0
        while self._queue:
            entry = self._queue[0]
            if entry.future.done():  # the client went away (cancelled) before compute
                self._queue.popleft()
                self._queued_tokens -= len(entry.ids)
                self.num_cancelled_inputs += 1
                continue
            if entries and (tokens + len(entry.ids) > self.max_batch_tokens or len(entries) >= self.max_batch_seqs):
                break
            self._queue.popleft()
            self._queued_tokens -= len(entry.ids)
            entries.append(entry)
            tokens += len(entry.ids)
        return entries

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._slots.acquire()
            entries: list[_Entry] = []
            while not entries:
                await self._wake.wait()
                entries = self._cut()
                if not self._queue:
                    self._wake.clear()
            task = loop.create_task(self._process(entries))
            self._in_flight.add(task)
            task.add_done_callback(self._in_flight.discard)

    def _execute(self, batch, running: _Running):
        """On the engine thread: note when the batch really starts (the stall watchdog reads it)."""
        if all(e.future.done() for e in running.entries):
            return None  # every input was failed or cancelled while the batch waited for this thread
        running.started = time.perf_counter()
        return self.engine.execute_packed(batch)

    async def _process(self, entries: list[_Entry]) -> None:
        loop = asyncio.get_running_loop()
        running = _Running(entries)
        self._running.add(running)
        try:
            if self.fatal_error is not None:
                raise EngineUnavailableError(self.fatal_error)
            batch = pack([e.ids for e in entries])
            lazy = await loop.run_in_executor(self._engine_thread, self._execute, batch, running)
            if lazy is None:
                self.num_cancelled_inputs += sum(e.future.cancelled() for e in entries)
                return
            vectors = lazy.wait() if lazy.ready() else await loop.run_in_executor(self._readback_thread, lazy.wait)
            finished = time.perf_counter()
            record = BatchRecord(batch.num_seqs, batch.num_tokens, tuple(e.owner for e in entries),
                                 finished - running.started, running.started, finished)
            self.batch_log.append(record)
        except asyncio.CancelledError:
            raise
        except EngineUnavailableError as exc:
            _fail(entries, exc)
        except Exception as exc:
            error = BatchFailedError(f"computing the batch failed ({type(exc).__name__})")
            error.__cause__ = exc
            self.num_failed_batches += 1
            _fail(entries, error)
        except BaseException as exc:
            # SystemExit and the like end a plain thread: the engine is dead. Not re-raised, as a
            # SystemExit leaving a task would stop the whole event loop with every request in it.
            self.fatal_error = f"the engine thread died ({type(exc).__name__})"
            self.fail_pending(EngineUnavailableError(self.fatal_error))
            _fail(entries, EngineUnavailableError(self.fatal_error))
        else:
            for entry, vector in zip(entries, vectors):
                if not entry.future.done():
                    entry.future.set_result(vector)
            for listener in self.listeners:
                listener(record)
        finally:
            self._running.discard(running)
            self._slots.release()


def _fail(entries: list[_Entry], error: BaseException) -> None:
    for entry in entries:
        if not entry.future.done():
            entry.future.set_exception(error)
