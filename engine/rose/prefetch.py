"""Iterate in a background thread, a few items ahead of the consumer."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")
_END = object()


def prefetch(items: Iterable[T], depth: int = 2, name: str = "rose-prefetch") -> Iterator[T]:
    """Iterate `items` in a thread, at most `depth` ahead; its errors are raised here, in order.

    Closing the returned generator (or leaving it by an exception) stops the thread at its next
    item and closes `items` there, in the thread that iterated it: a generator cannot be closed
    from another thread while it runs.
    """
    slots: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(entry) -> bool:
        while not stop.is_set():
            try:
                slots.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        iterator = iter(items)
        try:
            for item in iterator:
                if not put((item, None)):
                    return
            put((_END, None))
        except BaseException as exc:  # handed to the consumer, which re-raises it
            put((_END, exc))
        finally:
            close_iterator(iterator)

    thread = threading.Thread(target=produce, name=name, daemon=True)
    thread.start()
    try:
        while True:
            item, error = slots.get()
            if item is _END:
                if error is not None:
                    raise error
                return
            yield item
    finally:
        stop.set()


def close_iterator(iterator: Iterator) -> None:
    """Close a generator (its `finally` blocks run now); other iterators need nothing."""
    close = getattr(iterator, "close", None)
    if close is not None:
        close()
