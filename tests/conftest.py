"""Shared fixtures: the default model's engine, the shared text workload, a real server process.

Tests come in two tiers. The fast one (`pytest -m "not slow"`) serves the app in process on a
fake engine (tests/support/fake_engine.py). The slow one holds everything with a real model or a real
server process: a test is marked `slow` by its module's `pytestmark`, by hand, or here, when it
uses one of REAL_MODEL_FIXTURES; one that loads a model or starts a server unmarked fails.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
# Several pytest processes (-n) oversubscribe the cores: each process's torch, and each server's
# engine, keeps a thread per core. OpenMP's idle threads then spin while they wait for the next
# parallel region, on cores another process needs; passive ones sleep at once. Same thread count,
# so every result's bits stay as they were. Set before torch loads (OpenMP reads it then), and
# inherited by every process a test starts.
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# The client compatibility suite's fixtures, registered once so that session fixtures start once.
pytest_plugins = ["tests.support.client_support"]

# Fixtures that load the real default model or start a real server process.
REAL_MODEL_FIXTURES = frozenset({"default_engine", "server", "docs_server", "locked_server", "model_ids_server"})


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Rewrite the asserts of this suite only, not of every installed pytest plugin's package.

    pytest marks each package that registers a plugin (schemathesis, hypothesis, langsmith, faker, ...)
    for assert rewriting, and where bytecode is not written (PYTHONDONTWRITEBYTECODE) it parses and
    rewrites hundreds of their modules again in every process of every run. Their asserts are not
    this suite's; a failure inside them still fails the test, with a plain message. pytest offers
    no option for this, so the hook's set is trimmed where it exists and left alone where it does not."""
    from _pytest.assertion.rewrite import assertstate_key

    hook = getattr(config.stash.get(assertstate_key, None), "hook", None)
    marked = getattr(hook, "_must_rewrite", None)
    if isinstance(marked, set):
        marked.intersection_update({name for name in marked if name == "tests" or name.startswith("tests.")})
        hook._marked_for_rewrite_cache.clear()


# A module-level mark that makes every test of the file slow: `pytestmark = pytest.mark.slow`, or a list holding it.
_WHOLE_FILE_SLOW = re.compile(r"^pytestmark\s*=\s*(pytest\.mark\.slow\b|\[[^\]]*\bpytest\.mark\.slow\b)", re.MULTILINE)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """The fast tier (`-m "not slow"`) does not import a file whose every test is slow: it would
    deselect them all anyway, after paying for the imports (transformers' models, the clients)
    and the assert rewriting of the whole file in every process."""
    if (config.option.markexpr or "").strip() != "not slow" or collection_path.suffix != ".py" \
            or not collection_path.name.startswith("test_"):
        return None
    return True if _WHOLE_FILE_SLOW.search(collection_path.read_text(encoding="utf-8")) else None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if REAL_MODEL_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    # The slow tier first (the sort is stable: each tier keeps its order): with the files shared
    # among processes (the README's -n 2), the long files start early and the short ones fill in
    # at the end, so the processes finish together.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


class UnmarkedSlowTestError(RuntimeError):
    """A test outside the slow tier loaded a real model or started a server process."""


@pytest.fixture(autouse=True)
def _fast_tier_stays_fast(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """In a test not marked slow, loading a real model or starting a server is an error.

    GPU tests are exempt: they are their own tier, skipped without CUDA."""
    if request.node.get_closest_marker("slow") is not None or request.node.get_closest_marker("gpu") is not None:
        return
    from rose_embed.engine.rose.engine import Engine

    def refuse(*_, **__):
        raise UnmarkedSlowTestError(f"{request.node.nodeid} loads a real model or starts a server: mark it slow")

    monkeypatch.setattr(Engine, "__init__", refuse)
    monkeypatch.setattr(ServerProcess, "__init__", refuse)

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data" / "stdlib_docstrings.jsonl"


def load_texts(n: int | None = None) -> list[str]:
    """The shared workload's paragraphs, in file order."""
    texts = []
    with DATA.open(encoding="utf-8") as f:
        for line in f:
            texts.append(json.loads(line)["text"])
            if n is not None and len(texts) >= n:
                break
    return texts


def texts_with_edges(n: int, joined: int) -> list[str]:
    """The first `n` paragraphs, an empty text, one of few words among punctuation, and the first
    `joined` paragraphs as one text (past a short model's limit, so cut)."""
    return [*load_texts(n), "", "Hello, world!!! (yes).", " ".join(load_texts(joined))]


@pytest.fixture(scope="session")
def texts() -> list[str]:
    return load_texts(2000)


@pytest.fixture(scope="session")
def default_engine():
    from rose_embed.engine.contract.config import EngineConfig
    from rose_embed.engine.rose.engine import Engine

    return Engine(EngineConfig(dtype="float32", max_batch_tokens=4096))


_LOG_DIRS: list[Path] = []  # this session's folder for server logs, under pytest's own temporary folder


@pytest.fixture(scope="session", autouse=True)
def server_log_dir(tmp_path_factory) -> Path:
    """Server logs go where pytest keeps its temporary files (the last few runs' only), not into $TMPDIR."""
    _LOG_DIRS.append(tmp_path_factory.mktemp("server-logs"))
    return _LOG_DIRS[-1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """`python -m rose_embed serve ...` on loopback, ready once /health says 200."""

    def __init__(self, *args: str, ready_timeout: float = 120.0, env: dict | None = None, wait_ready: bool = True,
                 new_session: bool = False):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        log_dir = _LOG_DIRS[-1] if _LOG_DIRS else Path(os.environ.get("TMPDIR", "/tmp"))
        self.log_path = log_dir / f"rose-embed-test-{self.port}.log"
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rose_embed", "serve", "--port", str(self.port), *args],
            cwd=REPO, env=env, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=new_session,  # a group of its own, for a signal to all of it, as Ctrl-C sends
        )
        if wait_ready:
            self._wait_ready(ready_timeout)

    def _wait_ready(self, timeout: float) -> None:
        # One client for every poll: a client per poll would load the certificate store each time,
        # CPU that the starting server waits for on a busy machine.
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=2) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
                try:
                    if client.get(self.url + "/health").status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"server not ready after {timeout} s:\n{self.log()}")

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-5000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


@pytest.fixture(scope="session")
def server() -> Iterator[ServerProcess]:
    """The default model served by a real process in float32, the exact path that tests compare with
    their references (shared by the tests that only read)."""
    proc = ServerProcess("--dtype", "float32", "--max-batch-tokens", "4096")
    yield proc
    proc.stop()
