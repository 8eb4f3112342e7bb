"""uvicorn's Server, told of a stop signal that came before it took the signals over.

The supervisor's own handler raises at the signal (server/processes/stop_signal.py); where code on the
way swallowed that raise, the signal is still noted, and this server, once its handlers are
in place, takes it as if it had come just then: it shuts down gracefully, then raises the
signal again for the supervisor, as on any SIGTERM.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import uvicorn

from rose_embed.server.http.forced_stop_server import ForcedStopServer


class _PendingStopServer(ForcedStopServer):
    def __init__(self, config: uvicorn.Config, pending_stop: Callable[[], int | None]):
        super().__init__(config)
        self._pending_stop = pending_stop

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        with super().capture_signals():
            signum = self._pending_stop()
            if signum is not None:
                self.handle_exit(signum, None)
            yield


def uvicorn_server(config: uvicorn.Config, pending_stop: Callable[[], int | None] | None) -> uvicorn.Server:
    """The front end's server (server/http/forced_stop_server.py), told of `pending_stop` where given."""
    return ForcedStopServer(config) if pending_stop is None else _PendingStopServer(config, pending_stop)
