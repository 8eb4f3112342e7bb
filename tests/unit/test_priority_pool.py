"""The front end's tokenizer threads (server/pipeline/priority_pool.py): small requests' work before large ones'."""

from __future__ import annotations

import asyncio
import threading

import pytest

from rose_embed.server.pipeline.priority_pool import LARGE, SMALL, PriorityPool


def test_small_work_runs_before_large_work_queued_ahead_of_it():
    pool = PriorityPool(1, "test")
    release, started, order = threading.Event(), threading.Event(), []
    try:
        busy = pool.submit(LARGE, lambda: (started.set(), release.wait()))  # holds the one thread
        assert started.wait(5)
        large = [pool.submit(LARGE, order.append, f"large {i}") for i in range(3)]
        small = pool.submit(SMALL, order.append, "small")
        release.set()
        for future in (busy, *large, small):
            future.result(5)
    finally:
        pool.shutdown()
    assert order == ["small", "large 0", "large 1", "large 2"]  # first come first served among equals


def test_an_error_reaches_the_awaiting_coroutine_and_shutdown_cancels_what_has_not_started():
    pool = PriorityPool(1, "test")
    release = threading.Event()

    async def failing():
        return await pool.run(SMALL, int, "not a number")

    with pytest.raises(ValueError):
        asyncio.run(failing())
    started = threading.Event()
    busy = pool.submit(LARGE, lambda: (started.set(), release.wait()))
    assert started.wait(5)
    waiting = pool.submit(LARGE, int, "1")
    pool.shutdown()
    release.set()
    busy.result(5)
    assert waiting.cancelled()
    with pytest.raises(RuntimeError):
        pool.submit(SMALL, int, "2")
