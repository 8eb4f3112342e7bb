"""The app on the fake engine, served by uvicorn with a front end's own settings
(server/processes/front_end.py's uvicorn_config), in a thread of the test's process: the real HTTP layer
over real sockets, in the fast tier."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx
import uvicorn

from rose_embed.server.app import create_app
from rose_embed.server.config import ServerConfig
from rose_embed.server.processes.front_end import uvicorn_config
from rose_embed.server.http.middleware import ObservedApp
from tests.support.fake_engine import FakeEngine


@dataclass
class ThreadServer:
    server: uvicorn.Server
    thread: threading.Thread
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def num_connections(self) -> int:
        return len(self.server.server_state.connections)

    def connect(self, timeout: float = 10) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=timeout)


@contextmanager
def serve_in_thread(config: ServerConfig, engine: FakeEngine | None = None) -> Iterator[ThreadServer]:
    """Serving once /health is 200; stopped (drained as on SIGTERM) at the end, unless a test stopped it."""
    app = ObservedApp(create_app(config, engine or FakeEngine()), log_inputs=config.log_inputs,
                      request_timeout=config.request_timeout)
    sock = socket.create_server(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn_config(app, config))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    running = ThreadServer(server, thread, sock.getsockname()[1])
    try:
        _wait_ready(running)
        yield running
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


def _wait_ready(running: ThreadServer) -> None:
    deadline = time.monotonic() + 30
    with httpx.Client(timeout=2) as client:
        while time.monotonic() < deadline:
            try:
                if client.get(running.url + "/health").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.02)
    raise RuntimeError("the server in the thread did not become ready")
