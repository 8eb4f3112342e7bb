"""Fault isolation in the batcher and the watchdog, in process, with a fake engine (fast)."""

from __future__ import annotations

import asyncio
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from server.batcher import Batcher, BatchFailedError, EngineUnavailableError, QueueFullError
from server.watchdog import Watchdog

DIM = 4


class _Ready:
    def __init__(self, vectors):
        self.vectors = vectors

    def ready(self):
        return True

    def wait(self):
        return self.vectors


class FakeEngine:
    """Each sequence's vector is [first id, length, 0, 0]; a sequence starting with `fault` misbehaves."""

    spec = SimpleNamespace(max_seq_len=8)

    def __init__(self, fault=None, delay=0.0):
        self.fault, self.delay = fault, delay
        self.computed: list[int] = []  # first ids of every sequence computed
        self.release = threading.Event()

    def execute_packed(self, batch):
        time.sleep(self.delay)
        cu = batch.cu_seqlens
        firsts = [int(batch.input_ids[cu[i]]) for i in range(batch.num_seqs)]
        if 666 in firsts:
            raise self.fault("boom")
        if 777 in firsts:
            self.release.wait(30)  # a stuck kernel, until the test lets it go
        self.computed.extend(firsts)
        out = np.zeros((batch.num_seqs, DIM), np.float32)
        out[:, 0] = firsts
        out[:, 1] = np.diff(cu)
        return _Ready(out)


def seq(first: int, n: int = 3) -> np.ndarray:
    return np.array([first] + [1] * (n - 1), dtype=np.int32)


def run(coro):
    return asyncio.run(coro)


def test_a_raising_batch_fails_only_its_own_requests():
    async def main():
        batcher = Batcher(FakeEngine(fault=RuntimeError), max_batch_tokens=8, max_batch_seqs=1)
        batcher.start()
        good = batcher.submit([seq(1)])
        bad = batcher.submit([seq(666)])
        after = batcher.submit([seq(2)])
        results = await asyncio.gather(*good, *bad, *after, return_exceptions=True)
        await batcher.stop()
        return results, batcher

    (r1, r2, r3), batcher = run(main())
    assert r1[0] == 1 and r3[0] == 2
    assert isinstance(r2, BatchFailedError)
    assert batcher.num_failed_batches == 1 and batcher.fatal_error is None


def test_a_dying_engine_thread_fails_everything_fast_and_for_good():
    async def main():
        batcher = Batcher(FakeEngine(fault=SystemExit), max_batch_tokens=8, max_batch_seqs=1)
        batcher.start()
        waiting = batcher.submit([seq(666)]) + batcher.submit([seq(3)])
        results = await asyncio.wait_for(asyncio.gather(*waiting, return_exceptions=True), 5)
        with pytest.raises(EngineUnavailableError):
            batcher.submit([seq(4)])
        await batcher.stop()
        return results, batcher

    results, batcher = run(main())
    assert all(isinstance(r, EngineUnavailableError) for r in results)
    assert "died" in batcher.fatal_error


def test_a_crashed_batcher_task_fails_waiting_requests():
    async def main():
        batcher = Batcher(FakeEngine(), max_batch_tokens=8, max_batch_seqs=4)

        def broken_cut():
            raise ValueError("a bug in the batcher")

        batcher._cut = broken_cut
        batcher.start()
        futures = batcher.submit([seq(1)])
        result = await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), 5)
        await batcher.stop()
        return result, batcher

    (result,), batcher = run(main())
    assert isinstance(result, EngineUnavailableError)
    assert "batcher stopped" in batcher.fatal_error


def test_watchdog_fails_requests_behind_a_stuck_batch_and_recovers():
    engine = FakeEngine()

    async def main():
        batcher = Batcher(engine, max_batch_tokens=8, max_batch_seqs=1)
        batcher.start()
        watchdog = Watchdog(batcher, stall_timeout=0.3)
        watchdog.start()
        stuck = batcher.submit([seq(777)])
        behind = batcher.submit([seq(5)])
        started = time.perf_counter()
        results = await asyncio.wait_for(asyncio.gather(*stuck, *behind, return_exceptions=True), 5)
        waited = time.perf_counter() - started
        problem = watchdog.problem()
        engine.release.set()  # the kernel comes back: the engine serves again
        while watchdog.problem() is not None:
            await asyncio.sleep(0.05)
        again = await asyncio.wait_for(asyncio.gather(*batcher.submit([seq(6)])), 5)
        watchdog.stop()
        await batcher.stop()
        return results, waited, problem, again

    results, waited, problem, again = run(main())
    assert all(isinstance(r, EngineUnavailableError) for r in results)
    assert waited < 3.0
    assert problem is not None and "stuck" in problem
    assert again[0][0] == 6
    assert 5 not in engine.computed  # the input behind the stuck batch was failed, not computed


def test_stop_does_not_wait_for_a_stuck_engine():
    engine = FakeEngine()

    async def main():
        batcher = Batcher(engine, max_batch_tokens=8, max_batch_seqs=1)
        batcher.start()
        batcher.submit([seq(777)])
        await asyncio.sleep(0.2)
        started = time.perf_counter()
        await batcher.stop(timeout=0.5)
        return time.perf_counter() - started

    try:
        assert run(main()) < 3.0
    finally:
        engine.release.set()


def test_cancelled_inputs_are_never_computed():
    engine = FakeEngine(delay=0.2)

    async def main():
        batcher = Batcher(engine, max_batch_tokens=8, max_batch_seqs=1, max_batches_in_flight=1)
        batcher.start()
        first = batcher.submit([seq(1)])
        gone = batcher.submit([seq(50), seq(51), seq(52)])
        await asyncio.sleep(0.05)  # the first batch computes; the others wait in the queue
        for future in gone:
            future.cancel()
        last = batcher.submit([seq(2)])
        await asyncio.gather(*first, *last)
        await batcher.stop()
        return batcher

    batcher = run(main())
    assert engine.computed == [1, 2]
    assert batcher.num_cancelled_inputs == 3


def test_queue_full_gives_an_integer_retry_after_of_at_most_60():
    async def main():
        batcher = Batcher(FakeEngine(), max_batch_tokens=8, max_batch_seqs=8, max_queued_tokens=10)
        # A slow history: 10 tokens per 100 s, so the estimate would be far above 60 s.
        from server.batcher import BatchRecord

        batcher.batch_log.append(BatchRecord(1, 10, (), 100.0))
        batcher.submit([seq(1, 8)])
        with pytest.raises(QueueFullError) as info:
            batcher.submit([seq(2, 8)])
        return info.value.retry_after

    retry_after = run(main())
    assert isinstance(retry_after, int) and 1 <= retry_after <= 60
    assert retry_after == 60
