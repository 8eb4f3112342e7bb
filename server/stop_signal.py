"""SIGTERM while the server starts, before uvicorn takes the stop signals over.

The supervisor's handler raises `Terminated` at whatever line the main thread is on, so that
a start in progress (the engines' spawns, uvicorn's imports) ends at once, through the
supervisor's cleanup. Two things could keep that raise from doing its job, and each is
covered:
- a spawn cut short while it writes to its child leaves the child a traceback: inside
  `deferred()` the handler only notes the signal, and the raise comes on leaving;
- code that swallows what a handler raises (a finaliser running at that moment only prints
  it): the handler notes the signal before raising, and the front end hands a noted stop to
  uvicorn once uvicorn has the signals (`pending()`), which then shuts down as on any SIGTERM.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager


class Terminated(BaseException):
    """SIGTERM (or, with several front ends, SIGHUP), once the front ends have drained.

    A BaseException, as KeyboardInterrupt is: library code's `except Exception` where the
    handler raises would turn it into another error (enum, building ssl's classes while
    uvicorn imports, makes it a TypeError)."""


class StopSignal:
    """SIGTERM's handler for the supervisor's main thread."""

    def __init__(self) -> None:
        self._received: int | None = None
        self._deferring = False

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self.handle)

    def pending(self) -> int | None:
        """The stop signal received so far, if any."""
        return self._received

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """Note a stop signal without raising until the block ends."""
        self._deferring = True
        try:
            yield
        finally:
            self._deferring = False
        if self._received is not None:
            raise Terminated

    def handle(self, signum: int, _frame) -> None:
        if self._received is None:
            self._received = signum
        if not self._deferring:
            raise Terminated
