"""Raw HTTP/1.1 over a socket, as a hostile or broken client speaks it: what httpx would refuse
to send, and answers read as they come, whatever the server does to the connection."""

from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

MiB = 1 << 20


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a reset ends it too)."""
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk


def read_response(sock: socket.socket) -> bytes:
    """One response on a kept-alive connection (framed by its Content-Length)."""
    data = b""
    while b"\r\n\r\n" not in data or len(data.partition(b"\r\n\r\n")[2]) < _content_length(data):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def _content_length(data: bytes) -> int:
    return int(split_response(data)[1].get("content-length", 0))


def split_response(data: bytes) -> tuple[int, dict[str, str], bytes]:
    """(status, headers by lower-case name, body) of one raw HTTP/1.1 response."""
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    return int(status_line.split(" ", 2)[1]), headers, body


def send_huge_header(port: int, size: int) -> tuple[bytes, float]:
    """Sends a head with one header of `size` bytes in 1 MiB writes, stopping once answered, while
    reading the answer as it comes (as a client that streams its request does); the answer and
    the seconds it took to come."""
    answered, result = threading.Event(), {}
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        def read() -> None:
            result["data"] = read_until_closed(sock)
            result["seconds"] = time.monotonic() - started
            answered.set()

        started = time.monotonic()
        reader = threading.Thread(target=read)
        reader.start()
        try:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ")
            for _ in range(size // MiB):
                if answered.is_set():
                    break
                sock.sendall(b"a" * MiB)
        except OSError:
            pass  # the server closed its side: what it answered is read above
        reader.join(60)
    return result["data"], result["seconds"]


def huge_header_while_polling_health(url: str, port: int, size: int) -> tuple[bytes, float, float]:
    """send_huge_header's answer and seconds, and the longest a /health request waited meanwhile
    (polled on a connection opened before the header started)."""
    with ThreadPoolExecutor(1) as pool, httpx.Client(timeout=30) as client:
        client.get(url + "/health")
        sending = pool.submit(send_huge_header, port, size)
        longest = 0.0
        while not sending.done():
            started = time.monotonic()
            assert client.get(url + "/health").status_code == 200
            longest = max(longest, time.monotonic() - started)
        data, seconds = sending.result()
    return data, seconds, longest
