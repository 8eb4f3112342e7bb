"""The load generator's minimal HTTP client against a real HTTP/1.1 server: keep-alive, both body framings."""

from __future__ import annotations

import asyncio
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bench.lib.lean_http import AsyncConnection, BlockingConnection


class _Echo(BaseHTTPRequestHandler):
    """Answers a POST with its body reversed; /chunked in chunks, /status/N with status N."""

    protocol_version = "HTTP/1.1"
    connections: set = set()

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        _Echo.connections.add(self.client_address)
        body = self.rfile.read(int(self.headers["Content-Length"]))[::-1]
        status = int(self.path.rsplit("/", 1)[1]) if self.path.startswith("/status/") else 200
        self.send_response(status)
        if self.path == "/chunked":
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(0, len(body), 7):
                piece = body[i:i + 7]
                self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
        else:
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)


@pytest.fixture()
def url():
    _Echo.connections = set()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


BODIES = [b'{"input": "x"}', b"a" * 100_000, b"", b"0123456789" * 3]


def test_blocking_connection_reads_both_framings_on_one_connection(url):
    connection = BlockingConnection(url)
    try:
        for path in ("/plain", "/chunked"):
            for body in BODIES:
                assert connection.post(path, body) == (200, body[::-1])
        assert connection.post("/status/422", b"bad") == (422, b"dab")
    finally:
        connection.close()
    assert len(_Echo.connections) == 1  # kept alive throughout


def test_async_connections_concurrently(url):
    async def client(n: int) -> list[tuple[int, bytes]]:
        connection = AsyncConnection(url)
        try:
            return [await connection.post("/chunked" if i % 2 else "/plain", b"%d-%d" % (n, i)) for i in range(20)]
        finally:
            await connection.close()

    async def main():
        return await asyncio.gather(*[client(n) for n in range(8)])

    results = asyncio.run(main())
    for n, replies in enumerate(results):
        assert replies == [(200, (b"%d-%d" % (n, i))[::-1]) for i in range(20)]
    assert len(_Echo.connections) == 8
