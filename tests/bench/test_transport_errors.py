"""The load generator counts a request lost below HTTP (closed without a response, reset) as a
failed request, in both patterns, and its lean client opens a fresh connection after one."""

from __future__ import annotations

import os
import socket
import struct
import threading
import time

import pytest

from bench.lib.bulk import run_bulk_client
from bench.lib.lean_http import BlockingConnection, TransportError
from bench.lib.traffic import make_plan, run_worker

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


class RudeServer:
    """Reads each request's head, then (per `answers`, one per accepted connection, the last one
    repeated) closes the connection without a response, resets it, or answers 200."""

    def __init__(self, answers: list[str]):
        self.answers, self.accepted = answers, 0
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            answer = self.answers[min(self.accepted, len(self.answers) - 1)]
            self.accepted += 1
            threading.Thread(target=self._answer, args=(conn, answer), daemon=True).start()

    @staticmethod
    def _answer(conn: socket.socket, answer: str) -> None:
        with conn:
            while True:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                if answer == "reset":  # linger 0: close() sends RST instead of FIN
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    return
                if answer == "close":
                    return
                conn.sendall(OK)

    def close(self) -> None:
        self._sock.close()


@pytest.fixture(params=["close", "reset"])
def rude(request):
    server = RudeServer([request.param])
    yield server
    server.close()


def test_the_bulk_client_counts_a_lost_request_as_a_failure(rude):
    now = time.monotonic()
    result = run_bulk_client(rude.url, [b'{"input": ["x"]}'], 0, now, now + 0.3)
    assert result.answered == []
    assert result.failures >= 2 and result.transport_errors == result.failures
    assert all(line.startswith("transport: ") for line in result.failure_lines)


def test_the_many_client_worker_counts_a_lost_request_as_a_failure(rude):
    texts = [f"text {i}" for i in range(40)]
    plan = make_plan(len(texts), 8, seed=0, formats=("base64",))
    result = run_worker(rude.url, texts, plan, 2, None, 0.0)
    assert result.transport_errors == len(plan) == len(result.errors)
    assert all(error.startswith("transport: ") for error in result.errors)
    assert len(result.indices) == 0
    # The generator's own CPU, reported beside the server's figures: this process's, which holds the rude
    # server's thread too, so at most every core of the machine over the worker's few milliseconds.
    assert 0 < result.cpu_share <= 1.1 * os.cpu_count()


def test_after_a_transport_error_the_next_request_opens_a_fresh_connection():
    server = RudeServer(["close", "answer"])
    connection = BlockingConnection(server.url)
    try:
        with pytest.raises(TransportError, match="closed without a complete response"):
            connection.post("/v1/embeddings", b"{}")
        assert connection.post("/v1/embeddings", b"{}") == (200, b"ok")
        assert server.accepted == 2
    finally:
        connection.close()
        server.close()
