"""SIGTERM and SIGINT while the server starts, before uvicorn takes the stop signals over.

The supervisor's handler raises the stop at whatever line the main thread is on (`Terminated`,
or KeyboardInterrupt after Ctrl-C, as Python's own handler would), so that a start in progress
ends at once, through the supervisor's cleanup. Three things could keep that raise from doing
its job, and each is covered:
- a spawn cut short while it writes to its child leaves the child a traceback, and a raise
  inside a class's `__set_name__` (the front end's imports make many) comes out as a
  RuntimeError with a traceback: inside `deferred()` the handler only notes the signal, and
  the raise comes on leaving, in the server's own code;
- code that swallows what a handler raises (a finaliser running at that moment only prints
  it): the handler notes the signal before raising, and the front end hands a noted stop to
  uvicorn once uvicorn has the signals (`pending()`), which then shuts down as on any SIGTERM.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Terminated(BaseException):
    """SIGTERM (or, with several front ends, SIGHUP), once the front ends have drained.

    A BaseException, as KeyboardInterrupt is: library code's `except Exception` where the
    handler raises would turn it into another error (enum, building ssl's classes while
    uvicorn imports, makes it a TypeError)."""


class StopSignal:
    """SIGTERM's and SIGINT's handler for the supervisor's main thread."""

    def __init__(self) -> None:
        self._received: int | None = None
        self._deferring = False

    def install(self) -> None:
        for sig in HANDLED_SIGNALS:
            signal.signal(sig, self.handle)

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
            _raise_stop(self._received)

    def handle(self, signum: int, _frame) -> None:
        if self._received is None:
            self._received = signum
        if not self._deferring:
            _raise_stop(signum)


def _raise_stop(signum: int) -> None:
    # Ctrl-C stays a KeyboardInterrupt: the command then ends as Ctrl-C ends a process
    # (server/cli/main.py), and uvicorn, once it has drained, raises SIGINT again to get here.
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated
