"""App-level behaviour through Litestar's test client: naming, readiness, routes, status codes (fake engine)."""

from __future__ import annotations

import asyncio
import os
import threading

import pytest
from litestar.testing import AsyncTestClient

from rose_embed.server.app import create_app
from rose_embed.server.runtime import Runtime
from tests.support.fake_engine import FAKE_MODEL, FakeEngine, fake_config
from tests.support.processes import mapped_shared_memory, shared_memory


async def _ready(app) -> None:
    while not app.state.runtime.is_ready:
        await asyncio.sleep(0.02)


def test_served_model_name():
    async def scenario():
        app = create_app(fake_config(served_model_name="my-embedder"), FakeEngine())
        async with AsyncTestClient(app) as client:
            await _ready(app)
            models = (await client.get("/models")).json()
            ok = await client.post("/v1/embeddings", json={"model": "my-embedder", "input": "hi"})
            other = await client.post("/v1/embeddings", json={"model": FAKE_MODEL, "input": "hi"})
            one = await client.get("/v1/models/my-embedder")
            return models, ok, other, one

    models, ok, other, one = asyncio.run(scenario())
    assert [m["id"] for m in models["data"]] == ["my-embedder"]
    assert ok.status_code == 200 and ok.json()["model"] == "my-embedder"
    assert other.status_code == 404 and other.json()["error"]["code"] == "model_not_found"
    assert one.status_code == 200 and one.json()["id"] == "my-embedder"


def test_health_is_503_until_the_model_is_ready(monkeypatch):
    # A threading.Event: the app runs on the test client's own loop in another thread, and an
    # asyncio.Event set from this loop would not wake that one (the test hung at times).
    release = threading.Event()
    original = Runtime._load_and_warm_up

    async def held_load(self):
        while not release.is_set():
            await asyncio.sleep(0.01)
        await original(self)

    monkeypatch.setattr(Runtime, "_load_and_warm_up", held_load)

    async def scenario():
        app = create_app(fake_config(), FakeEngine())
        async with AsyncTestClient(app) as client:
            before = await client.get("/health")
            early = await client.post("/v1/embeddings", json={"input": "too early"})
            release.set()
            await _ready(app)
            after = await client.get("/health")
            return before, early, after

    before, early, after = asyncio.run(scenario())
    assert before.status_code == 503 and before.json()["error"]["code"] == "model_not_ready"
    assert early.status_code == 503 and early.headers["retry-after"] == "1"
    assert after.status_code == 200 and after.json()["status"] == "ok"


def test_post_is_200_and_openapi_lists_routes():
    async def scenario():
        app = create_app(fake_config(), FakeEngine())
        async with AsyncTestClient(app) as client:
            await _ready(app)
            return await client.post("/embeddings", json={"input": ["a"]}), await client.get("/docs/openapi.json")

    response, schema = asyncio.run(scenario())
    assert response.status_code == 200  # OpenAI's status, not Litestar's 201 default for POST
    assert {"/v1/embeddings", "/embeddings", "/v1/models", "/health"} <= set(schema.json()["paths"])


def _gone_client_scenario() -> tuple[int, bool, list[str]]:
    """A request whose client has gone while its pieces wait: (status, pieces cancelled, what asyncio logged)."""
    import gc

    from rose_embed.server.http.errors import APIError
    from rose_embed.server.pipeline.request_pipeline import _with_deadline

    class GoneClient:
        async def receive(self):
            return {"type": "http.disconnect"}

    async def scenario():
        loop = asyncio.get_running_loop()
        logged = []
        loop.set_exception_handler(
            lambda _, context: logged.append(f"{context['message']}: {context.get('task') or context.get('future')!r}"))
        pieces = [loop.create_future() for _ in range(3)]  # never computed

        async def work():
            return await asyncio.gather(*pieces)

        status = None
        try:
            await _with_deadline(work(), GoneClient(), timeout=None)
        except APIError as exc:
            status = exc.status
        await asyncio.sleep(0.05)
        gc.collect()
        await asyncio.sleep(0.05)
        return status, all(f.cancelled() for f in pieces), logged

    return asyncio.run(scenario())


@pytest.mark.slow  # a Python process of its own, with torch
def test_a_client_that_leaves_leaves_no_unretrieved_error_behind():
    """The request's work is cancelled when its client goes (a 499); asyncio must not log
    "exception was never retrieved" for what it was waiting on.

    In a process of its own: the garbage collection it forces would otherwise also finalize
    coroutines other tests abandoned, and what they log would land on this loop's handler."""
    import json
    import subprocess
    import sys

    script = "import json; from tests.api.test_server_inprocess import _gone_client_scenario as s; print(json.dumps(s()))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    status, all_cancelled, logged = json.loads(done.stdout.splitlines()[-1])
    assert status == 499 and all_cancelled
    assert logged == []


def _engine_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "rose-engine" and t.is_alive()]


def test_a_stop_while_the_model_warms_up_starts_no_engine_behind_it():
    """SIGTERM during warm-up: the load thread, which outlives its cancelled task, must not start
    an engine thread that nobody would stop."""
    warming, release, warmed = threading.Event(), threading.Event(), threading.Event()

    class SlowToWarm(FakeEngine):
        def warm_up(self):
            warming.set()
            release.wait(30)
            super().warm_up()
            warmed.set()

    before = set(_engine_threads())

    async def scenario():
        runtime = Runtime(fake_config(), SlowToWarm())
        runtime.start()
        await asyncio.to_thread(warming.wait, 30)
        await runtime.stop()
        release.set()
        await asyncio.to_thread(warmed.wait, 30)
        await asyncio.sleep(0.5)  # what the load thread does next takes microseconds
        return runtime._in_process

    assert asyncio.run(scenario()) is None
    assert not set(_engine_threads()) - before


def test_a_stop_after_the_engine_started_but_before_the_front_end_attached_ends_it():
    """The other side of that window: the engine thread runs, but the cancelled load never handed
    its links over, so no goodbye can come; stop() ends the engine and frees its memory anyway."""
    before = set(_engine_threads())

    async def scenario():
        runtime = Runtime(fake_config(), FakeEngine())
        runtime._load_task = asyncio.get_running_loop().create_future()
        runtime._load_task.set_result(None)
        await asyncio.to_thread(runtime._serve_in_process)  # as a load whose task was then cancelled
        started = bool(set(_engine_threads()) - before)
        blocks = mapped_shared_memory({os.getpid()}) - blocks_before
        await runtime.stop()
        return started, runtime._in_process.thread.is_alive(), blocks

    blocks_before = mapped_shared_memory({os.getpid()})
    started, still_running, blocks = asyncio.run(scenario())
    assert started and not still_running
    assert len(blocks) == 2 and not blocks & shared_memory()  # its arena and board, unlinked


def test_a_stop_while_the_part_processes_start_stops_them(monkeypatch):
    """The same window for the part processes a front end without a supervisor starts itself."""
    from rose_embed.server import runtime as runtime_module

    starting, release, stopped = threading.Event(), threading.Event(), threading.Event()

    class Pool:
        addresses = ()

        def stop(self):
            stopped.set()

    def slow_start(recipe, num_processes):
        starting.set()
        release.wait(30)
        return Pool()

    monkeypatch.setattr(runtime_module, "start_part_processes", slow_start)

    async def scenario():
        runtime = Runtime(fake_config(part_processes=1), FakeEngine())
        runtime.start()
        await asyncio.to_thread(starting.wait, 30)
        await runtime.stop()
        release.set()
        return await asyncio.to_thread(stopped.wait, 10)

    assert asyncio.run(scenario())
