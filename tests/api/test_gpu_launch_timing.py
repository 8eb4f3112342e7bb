"""On a GPU the engine loop launches the next batch shortly before the one computing ends
(engine/queue/launch_clock.py), so a query that arrives while a bulk batch computes rides the very
next batch, not the one after a batch queued behind it; and the front end keeps arena room for
small requests (engine/contract/arena.py), so the query does not first wait for a bulk batch to land
for room. Shown in process on the CPU with a fake GPU: batches take a fixed time one after the
other, as on a CUDA stream, and their vectors are ready only at their end."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import torch

from bench.lib.common import DEFAULT_DATA, build_texts
from rose_embed.engine.contract.config import EngineConfig
from rose_embed.engine.queue.engine_loop import EngineLoop
from tests.support.fake_engine import FakeEngine, fake_config, serve_async

BATCH_SECONDS = 0.1
TEXTS = build_texts(DEFAULT_DATA, 250, 1)


class _Ready:
    """A batch's vectors, on the host only once the fake device has computed them."""

    def __init__(self, lazy, end: float):
        self._lazy, self._end = lazy, end

    def ready(self) -> bool:
        return time.monotonic() >= self._end

    def wait(self) -> np.ndarray:
        time.sleep(max(0.0, self._end - time.monotonic()))
        return self._lazy.wait()


class _FakeGpu(FakeEngine):
    """Batches computed one after the other, each BATCH_SECONDS from its start, launch returning at once."""

    device = torch.device("cuda")

    def __init__(self):
        super().__init__()
        self.device_free = 0.0
        self.spans: list[tuple[float, float]] = []  # (start, end) of each batch on the device

    def execute_packed(self, batch):
        lazy = super().execute_packed(batch)
        start = max(time.monotonic(), self.device_free)
        self.device_free = end = start + BATCH_SECONDS
        self.spans.append((start, end))
        return _Ready(lazy, end)


QUERY = "how do I open a file"


def _query_beside_bulk(fake: _FakeGpu) -> tuple[float, float, object, object]:
    """A bulk request, then, a few of its batches in and just after one starts computing (the loop has
    learned its speed), one query: (when it was sent, when answered, its response, the bulk one's)."""
    config = fake_config(engine=EngineConfig(device="cpu", max_batch_tokens=512))

    async def scenario():
        async with serve_async(fake, config) as client:
            bulk = asyncio.ensure_future(client.post("/v1/embeddings", json={"input": TEXTS}))
            while len(fake.spans) < 4 or not 0 <= time.monotonic() - fake.spans[-1][0] < 0.02:
                await asyncio.sleep(0.001)
            sent = time.monotonic()
            query = await client.post("/v1/embeddings", json={"input": QUERY})
            return sent, time.monotonic(), query, await bulk

    return asyncio.run(scenario())


def test_a_query_arriving_while_a_bulk_batch_computes_rides_the_next_batch(monkeypatch):
    monkeypatch.setattr(EngineLoop, "_record_memory", lambda self: None)  # no CUDA here to read
    fake = _FakeGpu()
    sent, done, query, bulk = _query_beside_bulk(fake)
    assert query.status_code == bulk.status_code == 200
    computing = next(end for start, end in fake.spans if start <= sent < end)
    # The next batch after the one computing holds the query: answered about one batch after it ends,
    # where a batch launched ahead would have made it two.
    assert done - computing < 1.5 * BATCH_SECONDS, (done - computing, fake.spans)
    assert len(fake.spans) > 8  # the bulk request was still computing when the query came
    # Its piece reached the engine at once though the bulk request's pieces filled the arena's shared room.
    assert float(query.headers["x-preparation-time-ms"]) < 0.2 * BATCH_SECONDS * 1000
    np.testing.assert_allclose(query.json()["data"][0]["embedding"], fake.embed([QUERY])[0],
                               atol=1e-6)


class _FakeLargeGpu(_FakeGpu):
    """A large model's GPU: a batch takes its tokens' time, and warm-up gave an express budget of an eighth."""

    express_batch_tokens = 64

    def __init__(self, query: str = ""):
        super().__init__()
        self.sizes: list[int] = []
        self.query_ids = self.tokenize([query])[0] if query else None
        self.holds_query: list[bool] = []  # per batch: whether one of its sequences is the query's

    def execute_packed(self, batch):
        lazy = super().execute_packed(batch)
        start, _ = self.spans[-1]
        self.device_free = end = start + BATCH_SECONDS * batch.num_tokens / 512
        self.spans[-1] = (start, end)
        self.sizes.append(batch.num_tokens)
        cu = batch.cu_seqlens
        self.holds_query.append(self.query_ids is not None and any(
            np.array_equal(batch.input_ids[a:b], self.query_ids) for a, b in zip(cu[:-1], cu[1:])))
        return _Ready(lazy._lazy, end)


def test_while_a_query_waits_beside_bulk_the_next_batch_is_cut_at_the_express_budget(monkeypatch):
    """Its batch holds the query and bulk inputs up to the express budget, so it is answered about an
    eighth of a full batch after that batch starts, where a full batch would take all of one; and once no
    query waits, batches are full again."""
    monkeypatch.setattr(EngineLoop, "_record_memory", lambda self: None)
    fake = _FakeLargeGpu(query=QUERY)
    sent, done, query, bulk = _query_beside_bulk(fake)
    assert query.status_code == bulk.status_code == 200
    at = next(i for i, (start, end) in enumerate(fake.spans) if start <= sent < end)
    (ridden,) = [i for i, holds in enumerate(fake.holds_query) if holds]
    # The next batch, or on a busy machine the one after (launched before the query's piece came).
    assert at < ridden <= at + 2 and fake.sizes[ridden] <= fake.express_batch_tokens < fake.sizes[at], fake.sizes
    assert done - fake.spans[ridden][0] < 0.5 * BATCH_SECONDS, (done - fake.spans[ridden][0], fake.sizes)
    assert max(fake.sizes[ridden + 1:]) > fake.express_batch_tokens  # full batches again once it is answered



def test_while_queries_keep_coming_batches_stay_at_the_express_budget_between_them(monkeypatch):
    """A query every 30 ms, a full batch 100 ms: between two queries none waits, but one came within a
    full batch's time, so the batches cut then are express ones too (a full one would hold the next
    query for all of it); once the queries stop, batches are full again."""
    monkeypatch.setattr(EngineLoop, "_record_memory", lambda self: None)
    fake = _FakeLargeGpu()
    config = fake_config(engine=EngineConfig(device="cpu", max_batch_tokens=512))

    async def scenario():
        async with serve_async(fake, config) as client:
            bulk = asyncio.ensure_future(client.post("/v1/embeddings", json={"input": TEXTS}))
            while len(fake.spans) < 4:
                await asyncio.sleep(0.001)
            first = len(fake.sizes)
            stop = time.monotonic() + 0.5
            while time.monotonic() < stop:
                assert (await client.post("/v1/embeddings", json={"input": "a query"})).status_code == 200
                await asyncio.sleep(0.03)
            during = fake.sizes[first + 1:]
            await bulk
            return during, fake.sizes[first + 1 + len(during):]

    during, after = asyncio.run(scenario())
    # The first was cut before the first query came. A bulk text longer than what a query leaves goes
    # alone (the model reads at most 256 tokens of one); a full batch holds about 500.
    express = sorted(during[1:])
    assert len(express) > 10 and express[len(express) // 2] <= _FakeLargeGpu.express_batch_tokens, during
    assert express[-1] <= 256 + 16, during
    assert max(after) > 300, after
