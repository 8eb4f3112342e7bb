"""uvicorn's Server with a forced stop that answers: a second Ctrl-C while it drains.

uvicorn's own forced stop stops waiting for the requests in flight and leaves them to be
cancelled as its event loop closes: each then reaches the client as a plain-text 500 and the
log as a traceback, and the app's shutdown (the engines told that this front end is done)
is skipped, its task cancelled with another traceback. This server cuts the requests off
itself instead: each is cancelled and answered 503 in OpenAI's envelope (server/http/middleware.py),
its connection closed, and the shutdown goes on as after any drain, at once since nothing is
left to wait for. Should a request not end on its cancellation, --shutdown-timeout still ends
the wait.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket

import uvicorn

logger = logging.getLogger("rose_embed.server")


class ForcedStopServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config):
        super().__init__(config)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._is_forced = False

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()  # the signal handler hands the cut-off to it
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame) -> None:
        forcing = self.should_exit and sig == signal.SIGINT
        super().handle_exit(sig, frame)  # notes the signal, raised again once the server has stopped
        if forcing and self._loop is not None:
            self.force_exit = False  # uvicorn's own forced stop is what this replaces
            # A signal handler runs between two steps of the loop's own code: the cut-off waits for its turn.
            self._loop.call_soon_threadsafe(self._cut_off_requests)

    def _cut_off_requests(self) -> None:
        in_flight = [task for task in self.server_state.tasks if not task.done()]
        if not self._is_forced:
            self._is_forced = True
            logger.warning("Ctrl-C again: forcing the shutdown; %d request(s) in flight are answered 503",
                           len(in_flight))
        for task in in_flight:
            task.cancel()
