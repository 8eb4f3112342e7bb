"""The batcher: one asyncio task, first come first served, batches cut by a token budget.

Each input of a request is its own entry, so batches form across requests. While one
batch computes on the engine thread, the next is cut and packed, and waits its turn.
"""

from __future__ import annotations

import asyncio
import collections
import time
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
    compute_seconds: float


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

    @property
    def queued_tokens(self) -> int:
        return self._queued_tokens

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="rose-batcher")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        if self._in_flight:
            await asyncio.gather(*self._in_flight, return_exceptions=True)
        for entry in self._queue:
            if not entry.future.done():
                entry.future.cancel()
        self._queue.clear()
        self._engine_thread.shutdown(wait=True)
        self._readback_thread.shutdown(wait=True)

    def submit(self, seqs: list[np.ndarray], owner: object = None) -> list[asyncio.Future]:
        """Queue one request's inputs; each future resolves to that input's vector."""
        tokens = sum(len(s) for s in seqs)
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

    async def _process(self, entries: list[_Entry]) -> None:
        loop = asyncio.get_running_loop()
        try:
            batch = pack([e.ids for e in entries])
            started = time.perf_counter()
            lazy = await loop.run_in_executor(self._engine_thread, self.engine.execute_packed, batch)
            vectors = lazy.wait() if lazy.ready() else await loop.run_in_executor(self._readback_thread, lazy.wait)
            self.batch_log.append(
                BatchRecord(batch.num_seqs, batch.num_tokens, tuple(e.owner for e in entries), time.perf_counter() - started)
            )
        except Exception as exc:
            error = BatchFailedError(f"computing the batch failed ({type(exc).__name__})")
            error.__cause__ = exc
            for entry in entries:
                if not entry.future.done():
                    entry.future.set_exception(error)
        else:
            for entry, vector in zip(entries, vectors):
                if not entry.future.done():
                    entry.future.set_result(vector)
        finally:
            self._slots.release()
