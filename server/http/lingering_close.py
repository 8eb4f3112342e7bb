"""A connection's last moments after the server answered it mid-request and gave up on it.

Closing a socket while the client's bytes are still arriving makes the kernel reset the
connection, and a reset can reach the client before it has read the answer (RFC 9112, 9.6): a
client still sending a header of megabytes would see "connection reset" instead of its 431. So
the connection is handed to this protocol instead: it half-closes (the answer is complete),
reads and drops whatever still comes, without parsing it, and closes once the client closes its
side, or after LINGER_SECONDS at the most.
"""

from __future__ import annotations

import asyncio

# Long enough for a client to finish a send it had started and read the answer; short enough that
# a client that keeps sending holds nothing for long.
LINGER_SECONDS = 2.0


class LingeringClose(asyncio.Protocol):
    """Takes `transport` over; counts in `connections` (uvicorn's set of the server's connections,
    whose `shutdown()` it asks for at a stop) until the connection is gone."""

    def __init__(self, transport: asyncio.Transport, connections: set, loop: asyncio.AbstractEventLoop):
        self.transport, self.connections = transport, connections
        connections.add(self)
        self._timer = loop.call_later(LINGER_SECONDS, transport.close)
        transport.set_protocol(self)
        if transport.can_write_eof():
            transport.write_eof()
        transport.resume_reading()  # uvicorn may have paused it; what arrives must still be drained

    def data_received(self, data: bytes) -> None:
        pass  # dropped: the request was answered already

    def eof_received(self) -> None:
        self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._timer.cancel()
        self.connections.discard(self)

    def shutdown(self) -> None:
        self.transport.close()
