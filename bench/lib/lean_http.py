"""A minimal HTTP/1.1 client for the load generator: one keep-alive connection, POST, read the body.

A GPU server answers tens of thousands of texts a second; a general-purpose client (httpx)
spends more CPU per response than the server does, and the load generator shares the
machine with the server. This one does only what the benchmark needs: it writes the request
in one call, reads the status line and headers, and reads a Content-Length (or chunked) body.
Both an asyncio version (for many concurrent clients) and a blocking one (for latency and
bulk clients, where the client's own overhead would otherwise be counted as the server's)
are here.

A request lost below HTTP (connection refused or reset, broken pipe, the connection closed
before a whole response came) raises TransportError: the load generator counts it as a
failed request, as a user's client would see it, not as a crash of the benchmark. The
connection is dropped with it, and the next post opens a fresh one.
"""

from __future__ import annotations

import asyncio
import socket
from urllib.parse import urlsplit


class TransportError(ConnectionError):
    """The request got no complete HTTP response: reset, broken pipe, closed early, timed out."""


def _request_head(host: str, path: str, body: bytes) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode("ascii")


def _parse_head(head: bytes, timings: dict[str, float] | None = None) -> tuple[int, int | None, bool]:
    """(status, content length or None, chunked) from the status line and headers; the server's
    x-<phase>-time-ms headers into `timings` (phase: milliseconds) where one is given."""
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    length, chunked = None, False
    for line in lines[1:]:
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name == "content-length":
            length = int(value)
        elif name == "transfer-encoding" and "chunked" in value.lower():
            chunked = True
        elif timings is not None and name.startswith("x-") and name.endswith("-time-ms"):
            timings[name[2:-8]] = float(value)
    return status, length, chunked


def _retry_after(head: bytes) -> float | None:
    for line in head.decode("latin-1").split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "retry-after":
            try:
                return float(value)
            except ValueError:
                return None
    return None


def _address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 80


def _describe(exc: BaseException) -> str:
    if isinstance(exc, EOFError):  # asyncio.IncompleteReadError is one
        return "connection closed without a complete response"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class AsyncConnection:
    def __init__(self, url: str):
        self.host, self.port = _address(url)
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        try:
            return await self._post(path, body)
        except (OSError, EOFError, asyncio.LimitOverrunError, ValueError) as exc:
            self._drop()
            raise TransportError(_describe(exc)) from exc

    async def _post(self, path: str, body: bytes) -> tuple[int, bytes]:
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port, limit=1 << 20)
        self._writer.write(_request_head(self.host, path, body) + body)
        status, length, chunked = _parse_head(await self._reader.readuntil(b"\r\n\r\n"))
        if chunked:
            parts = []
            while (size := int((await self._reader.readuntil(b"\r\n"))[:-2].split(b";")[0], 16)) > 0:
                parts.append(await self._reader.readexactly(size))
                await self._reader.readexactly(2)
            await self._reader.readuntil(b"\r\n")  # the empty trailer
            return status, b"".join(parts)
        return status, await self._reader.readexactly(length or 0)

    def _drop(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            try:
                await self._writer.wait_closed()
            except OSError:  # already reset by the server: nothing left to close
                pass
        self._reader = self._writer = None


class BlockingConnection:
    def __init__(self, url: str, timeout: float = 60.0):
        self.host, self.port = _address(url)
        self.timeout = timeout
        self._sock: socket.socket | None = None
        self._file = None
        self.timings: dict[str, float] = {}  # the last response's phases as the server timed them
        self.retry_after: float | None = None  # the last response's Retry-After, in seconds

    def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        try:
            return self._post(path, body)
        except (OSError, EOFError, ValueError) as exc:  # socket.timeout is an OSError
            self.close()
            raise TransportError(_describe(exc)) from exc

    def _post(self, path: str, body: bytes) -> tuple[int, bytes]:
        if self._sock is None:
            self._sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._file = self._sock.makefile("rb")
        self._sock.sendall(_request_head(self.host, path, body) + body)
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            line = self._file.readline()
            if not line:
                raise EOFError
            head += line
        self.timings = {}
        status, length, chunked = _parse_head(head[:-4], self.timings)
        self.retry_after = _retry_after(head)
        if not chunked:
            return status, self._read(length or 0)
        parts = []
        while (size := int(self._file.readline()[:-2].split(b";")[0], 16)) > 0:
            parts.append(self._read(size))
            self._read(2)
        self._file.readline()
        return status, b"".join(parts)

    def _read(self, n: int) -> bytes:
        data = self._file.read(n)
        if len(data) < n:
            raise EOFError
        return data

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        if self._sock is not None:
            self._sock.close()
        self._sock = self._file = None
