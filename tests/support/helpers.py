"""Small helpers shared by the hardening tests (the server fixture lives in conftest.py)."""

from __future__ import annotations

import asyncio
import json
import re
import time
import shutil
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

from rose_embed.engine.model_files.loader import resolve_model_dir

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
# The fault markers are sent as the model's own token ids, which the server takes as they are
# only with --token-ids model (by default token ids are cl100k_base's, decoded to text).
PLUGIN = ("--engine-plugin", "tests.support.fault_plugins:install", "--token-ids", "model")
# A fenced code block of a Markdown page: its language and its code.
CODE_BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)
# Things that must never reach a client: a traceback, a source path, an exception's repr.
_LEAKS = re.compile(r"Traceback|File \"|\.py\b|/secret/|/work/|site-packages")


# One TLS context for every one-off request below: a client built without one loads the
# certificate store each time, CPU taken from the servers under test (which speak plain HTTP).
_TLS = ssl.create_default_context()


def embed(url: str, body, timeout: float = 60, **kwargs) -> httpx.Response:
    return httpx.post(url + "/v1/embeddings", json=body, timeout=timeout, verify=_TLS, **kwargs)


def assert_envelope(r: httpx.Response, status: int, code: str | None = None) -> dict:
    """The response is `status` in OpenAI's envelope and leaks nothing of the server's insides."""
    assert r.status_code == status, r.text
    assert not _LEAKS.search(r.text), r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert error["message"]
    if code is not None:
        assert error["code"] == code, error
    return error


def metric(url: str, name: str) -> float:
    """One sample's value from a server's /metrics (name with labels as exposed, e.g. 'x_total{a="b"}')."""
    return sample(httpx.get(url + "/metrics", timeout=10, verify=_TLS).text, name)


def sample(exposition: str, name: str) -> float:
    """One sample's value in a Prometheus text exposition."""
    for line in exposition.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0  # a labelled counter that was never incremented is absent


def raw_post(port: int, headers: dict[str, str], body: bytes, timeout: float = 30) -> tuple[int, bytes]:
    """POST /v1/embeddings over a bare socket: sends what httpx would refuse (a Content-Length
    far beyond the bytes sent, say) and returns the status and the response's body."""
    import socket

    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(f"POST /v1/embeddings HTTP/1.1\r\nHost: 127.0.0.1\r\n{head}\r\n".encode() + body)
        data = b""
        while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < _content_length(data):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    status = int(data.split(b" ", 2)[1])
    return status, data.split(b"\r\n\r\n", 1)[1]


def _content_length(data: bytes) -> int:
    for line in data.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


def code_blocks(page: Path, language: str, section: str | None = None) -> list[str]:
    """The code of a Markdown page's fenced blocks in `language`, in page order; with `section`, only
    those under the `## section` heading, up to the next `## ` one (a page may hold two subjects)."""
    text = page.read_text(encoding="utf-8")
    if section is not None:
        text = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    return [code for lang, code in CODE_BLOCK.findall(text) if lang == language]


def config_only_model(path: Path, config: dict) -> Path:
    """A model folder of `config` and the default model's tokenizer, no weights: enough for the
    checks that refuse a model before anything loads."""
    path.mkdir()
    shutil.copy(resolve_model_dir(None)[0] / "tokenizer.json", path / "tokenizer.json")
    (path / "config.json").write_text(json.dumps(config))
    return path


async def longest_loop_stall(work: Callable[[], Awaitable], period: float) -> tuple[object, float]:
    """`work()`'s result, and the longest the event loop went without turning while it ran: a
    ticker sleeps `period` again and again, and a turn that took far longer was held up."""
    stalls, done = [], asyncio.Event()

    async def tick():
        while not done.is_set():
            started = time.perf_counter()
            await asyncio.sleep(period)
            stalls.append(time.perf_counter() - started)

    ticker = asyncio.ensure_future(tick())
    await asyncio.sleep(0.05)  # ticking before the work starts
    try:
        result = await work()
    finally:
        done.set()
        await ticker
    return result, max(stalls)


def restarted_engine(url: str, old_pid: int, index: int = 0, timeout: float = 120.0) -> dict:
    """Wait until /health is 200 with engine `index` serving from a process other than `old_pid`
    (the supervisor restarted it); that engine as /health lists it."""
    deadline = time.monotonic() + timeout
    while True:
        r = httpx.get(url + "/health", timeout=10, verify=_TLS)
        engine = r.json()["engines"][index] if r.status_code == 200 else {}
        if engine.get("state") == "serving" and engine["pid"] != old_pid:
            return engine
        assert time.monotonic() < deadline, f"engine {index} (pid {old_pid}) was not restarted within {timeout:.0f} s"
        time.sleep(0.2)
