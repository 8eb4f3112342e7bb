"""A small HTTP server on the loopback address, in a thread, that serves what the image-URL tests fetch:
image files, a redirect, a body larger than the limit (declared, or streamed without a length), a slow
answer, an HTML page and a 404."""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ImageServer:
    """`files`: path -> (content type, body); `url(path)` is where the app fetches it."""

    def __init__(self, server: ThreadingHTTPServer, files: dict[str, tuple[str, bytes]]):
        self._server = server
        self.files = files

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        scheme = "https" if isinstance(self._server.socket, ssl.SSLSocket) else "http"
        return f"{scheme}://{host}:{self._server.server_port}{path}"


def _handler(files: dict[str, tuple[str, bytes]], big_bytes: int, slow_s: float):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            path, _, query = self.path.partition("?")
            if path == "/redirect":  # ?to=URL
                self._head(302, {"Location": query.removeprefix("to="), "Content-Length": "0"})
            elif path == "/big-declared":  # refused from its Content-Length: the body is never sent
                self._head(200, {"Content-Type": "image/png", "Content-Length": str(big_bytes)})
            elif path == "/big-streamed":  # no length: cut off once past the limit
                self._head(200, {"Content-Type": "image/png", "Transfer-Encoding": "chunked"})
                chunk = b"\0" * 65536
                try:
                    for _ in range(big_bytes // len(chunk) + 1):
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.write(b"0\r\n\r\n")
                except OSError:  # the fetcher hung up, as it should
                    pass
            elif path == "/slow":
                time.sleep(slow_s)
                self._body("image/png", files["/cat.png"][1])
            elif path in files:
                self._body(*files[path])
            else:
                self._body("text/plain", b"not here", status=404)

        def _head(self, status: int, headers: dict[str, str]) -> None:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()

        def _body(self, content_type: str, body: bytes, status: int = 200) -> None:
            self._head(status, {"Content-Type": content_type, "Content-Length": str(len(body))})
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    return Handler


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        """A fetcher that hangs up (past the limit, past the timeout) is what the tests want."""


@contextmanager
def image_server(files: dict[str, tuple[str, bytes]], big_bytes: int = 0, slow_s: float = 0.0,
                 tls: ssl.SSLContext | None = None) -> Iterator[ImageServer]:
    """`tls`: serve https with this server-side context."""
    server = _QuietServer(("127.0.0.1", 0), _handler(files, big_bytes, slow_s))
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield ImageServer(server, files)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
