"""A pool of threads that runs small requests' work before large ones'.

A front end tokenizes in threads where that runs beside its event loop (the Rust tokenizer
releases the GIL). A plain thread pool runs its work first come, first served: a one-text
query's tokenization would wait behind every part of the bulk requests queued before it. Here
each piece of work has a priority (lower first, then first come): small requests' work goes to
the next free thread, large requests' work takes turns behind it.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

SMALL, LARGE = 0, 1  # priorities: a small request's work, a large request's


class PriorityPool:
    def __init__(self, num_threads: int, name: str):
        self._heap: list[tuple[int, int, Future, Callable, tuple]] = []
        self._numbers = itertools.count()
        self._ready = threading.Condition()
        self._is_shut_down = False
        self._threads = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True)
                         for i in range(num_threads)]
        for thread in self._threads:
            thread.start()

    def submit(self, priority: int, fn: Callable, *args: Any) -> Future:
        future: Future = Future()
        with self._ready:
            if self._is_shut_down:
                raise RuntimeError("the pool is shut down")
            heapq.heappush(self._heap, (priority, next(self._numbers), future, fn, args))
            self._ready.notify()
        return future

    async def run(self, priority: int, fn: Callable, *args: Any):
        """`fn(*args)` on a thread of the pool, awaited on the caller's event loop."""
        return await asyncio.wrap_future(self.submit(priority, fn, *args))

    def _work(self) -> None:
        while True:
            with self._ready:
                while not self._heap and not self._is_shut_down:
                    self._ready.wait()
                if not self._heap:
                    return
                _, _, future, fn, args = heapq.heappop(self._heap)
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # handed to whoever awaits it
                future.set_exception(exc)

    def shutdown(self) -> None:
        """Work not started is cancelled; threads end once their current work is done."""
        with self._ready:
            self._is_shut_down = True
            for _, _, future, _, _ in self._heap:
                future.cancel()
            self._heap.clear()
            self._ready.notify_all()
