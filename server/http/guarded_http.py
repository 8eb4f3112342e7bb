"""uvicorn's httptools protocol with the limits a server open to untrusted clients needs.

httptools has no limit on a request's head (its request line and headers): it joins a header's
pieces by copying them, so a header of megabytes held the event loop for seconds, and every other
request of the front end with it; nor does uvicorn bound how long a head may take to arrive, nor
how many connections it holds. This protocol counts the head's bytes as they arrive, before the
parser sees them, and answers past --max-header-bytes with 431 at once; closes a head that has not
arrived whole within --header-timeout of its first byte (408); closes a connection that sends
nothing after --keep-alive-timeout, as an idle keep-alive one; and answers a connection past
--max-connections with 503 and Retry-After as soon as it opens. Its own errors, and httptools'
400, are in OpenAI's envelope (server/http/protocol_errors.py) and counted in /metrics
(rose_http_refused_total{code}); a connection it gives up on lingers (server/http/lingering_close.py),
so that the client can read why.

When the server starts to drain, a request whose body is still arriving is marked in its ASGI
scope (DRAINING_KEY) and woken; server/http/middleware.py answers it 503 rather than wait for a
client that may take minutes to send it.

The hot path (a head that arrives in one read) adds a comparison and a few attribute writes per
request: no timer is armed unless a head arrives in pieces.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from dataclasses import dataclass

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from rose_embed.server.http.errors import APIError
from rose_embed.server.http.lingering_close import LingeringClose
from rose_embed.server.http.protocol_errors import (headers_too_large, headers_too_slow, invalid_http_request, raw_response,
                                    too_many_connections)

DRAINING_KEY = "rose.draining"


@dataclass(frozen=True)
class HttpLimits:
    max_header_bytes: int
    header_timeout: float
    max_connections: int


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    def __init__(self, *args, limits: HttpLimits, on_refused: Callable[[str], None], **kwargs):
        super().__init__(*args, **kwargs)
        self.limits = limits
        self.on_refused = on_refused  # told each answer's code (/metrics counts them)
        self._head_bytes = 0  # bytes read since the last request ended: its successor's head so far
        self._is_reading_body = False  # between a request's head and its end
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections:
            self._give_up(too_many_connections())
            return
        # uvicorn bounds the wait for a request only between two of them; the first waits as those do.
        self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self.timeout_keep_alive_handler)

    def data_received(self, data: bytes) -> None:
        if self._is_reading_body:
            super().data_received(data)
            return
        head_bytes = self._head_bytes + len(data)
        if head_bytes > self.limits.max_header_bytes:
            self._past_the_cap(data)
            return
        self._head_bytes = head_bytes
        super().data_received(data)
        # Bytes of a head that has not ended with them (a request that ended with them reset the
        # count): the rest must come within the header timeout.
        if self._head_bytes and not self._is_reading_body and self._head_timer is None \
                and not self.transport.is_closing():
            self._head_timer = self.loop.call_later(self.limits.header_timeout, self._head_timed_out)

    def _past_the_cap(self, data: bytes) -> None:
        """Feed the parser what fits; if the head has not ended within it, 431, else the rest as usual."""
        room = self.limits.max_header_bytes - self._head_bytes
        self._head_bytes = self.limits.max_header_bytes
        if room:
            super().data_received(data[:room])
        if self.transport.is_closing():
            return
        if not self._is_reading_body and self._head_bytes == self.limits.max_header_bytes:  # the same head still
            self._give_up(headers_too_large(self.limits.max_header_bytes))
            return
        self.data_received(data[room:])

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self._head_bytes:
            self._give_up(headers_too_slow())
        else:
            self.transport.close()

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def on_headers_complete(self) -> None:
        self._is_reading_body = True
        self._cancel_head_timer()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._is_reading_body = False
        self._head_bytes = 0

    def send_400_response(self, msg: str) -> None:
        self._give_up(invalid_http_request())

    def shutdown(self) -> None:
        cycle = self.cycle
        if self._is_reading_body and cycle is not None and not cycle.response_started:
            cycle.scope[DRAINING_KEY] = True  # type: ignore[literal-required]
            cycle.message_event.set()  # a receive() that waits for the body returns what has come
        super().shutdown()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)

    def _give_up(self, err: APIError) -> None:
        """Answer `err` and hand the connection over to linger until the client has read it."""
        self._cancel_head_timer()
        self._unset_keepalive_if_required()
        if self.cycle is not None and not self.cycle.response_complete:
            # A response still to come on this connection (a pipelined request) must not follow this one.
            self.cycle.disconnected = True
            self.cycle.message_event.set()
        self.transport.write(raw_response(err, self.server_state.default_headers))
        self.on_refused(err.code)
        self.connections.discard(self)
        LingeringClose(self.transport, self.connections, self.loop)


def guarded_protocol(limits: HttpLimits, on_refused: Callable[[str], None]):
    """The protocol class for uvicorn.Config(http=...); `on_refused` is told the code of every
    answer the protocol gives itself."""
    return functools.partial(GuardedHttpToolsProtocol, limits=limits, on_refused=on_refused)
