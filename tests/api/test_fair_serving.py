"""Fair scheduling through the whole app, in process on the CPU (docs/queue.md): a query is not held
behind bulk requests, bulk requests advance together, weights from `priority` and X-Priority, and
admission that refuses bulk requests at once while a query still gets in."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import numpy as np
import pytest

from bench.lib.common import build_texts, DEFAULT_DATA
from rose_embed.engine.contract.config import EngineConfig
from rose_embed.server.config import ServerConfig
from tests.support.fake_engine import FakeEngine, fake_config, serve_async
from tests.support.helpers import assert_envelope, sample

TEXTS = build_texts(DEFAULT_DATA, 1000, 1)


async def _timed(coro) -> tuple[object, float]:
    response = await coro
    return response, time.monotonic()


def _config(scheduling: str, **overrides) -> ServerConfig:
    return fake_config(engine=EngineConfig(device="cpu", max_batch_tokens=512, scheduling=scheduling), **overrides)


@pytest.mark.slow
@pytest.mark.parametrize("scheduling", ["fair", "fcfs"])
def test_a_one_text_request_behind_a_thousand_queued_texts_is_answered_before_the_bulk_requests_last_batch(
        scheduling):
    """With the real model in process: fair scheduling answers the query at once (on the CPU, between
    the layers of the batch in flight); strict arrival order holds it until the bulk request is done."""
    from rose_embed.engine.rose.engine import Engine

    config = ServerConfig(engine=EngineConfig(device="cpu", dtype="float32", choose_batch_tokens=True,
                                              scheduling=scheduling))
    engine = Engine(config.engine)

    async def scenario():
        async with serve_async(engine, config) as client:
            bulk_started = time.monotonic()
            bulk = asyncio.ensure_future(_timed(client.post("/v1/embeddings", json={"input": TEXTS})))
            await asyncio.sleep(0.3)  # every bulk text tokenized and queued, the first batches computing
            assert not bulk.done()
            sent = time.monotonic()
            query, query_done = await _timed(client.post("/v1/embeddings", json={"input": "how do I open a file"}))
            response, bulk_done = await bulk
            return query, query_done - sent, response, bulk_done - bulk_started, bulk_done - query_done

    query, query_seconds, response, bulk_seconds, bulk_after = asyncio.run(scenario())
    assert query.status_code == 200 and response.status_code == 200
    np.testing.assert_allclose(query.json()["data"][0]["embedding"], engine.embed(["how do I open a file"])[0],
                               atol=1e-5)
    assert len(response.json()["data"]) == 1000
    if scheduling == "fair":  # long before the bulk request's last batch
        assert query_seconds < 0.2 * bulk_seconds and bulk_after > 0.5 * bulk_seconds, (query_seconds, bulk_seconds)
    else:  # behind (nearly) every bulk text
        assert query_seconds > 0.5 * bulk_seconds, (query_seconds, bulk_seconds)


@pytest.mark.parametrize("scheduling", ["fair", "fcfs"])
def test_two_bulk_requests_advance_together(scheduling):
    fake = FakeEngine(delay=0.02)

    async def scenario():
        async with serve_async(fake, _config(scheduling)) as client:
            started = time.monotonic()
            first = asyncio.ensure_future(_timed(client.post("/v1/embeddings", json={"input": TEXTS[:300]})))
            await asyncio.sleep(0.02)
            second = asyncio.ensure_future(_timed(client.post("/v1/embeddings", json={"input": TEXTS[300:600]})))
            (a, a_done), (b, b_done) = await first, await second
            return a, b, a_done - started, b_done - started

    a, b, a_seconds, b_seconds = asyncio.run(scenario())
    assert a.status_code == b.status_code == 200
    np.testing.assert_allclose([d["embedding"] for d in b.json()["data"]], fake.embed(TEXTS[300:600]), atol=1e-6)
    if scheduling == "fair":
        assert a_seconds > 0.8 * b_seconds  # side by side, they end together
    else:
        assert a_seconds < 0.65 * b_seconds  # one after the other


@pytest.mark.parametrize("how", ["body", "header"])
def test_a_request_of_priority_minus_two_gets_four_times_the_share_of_a_default_one(how):
    fake = FakeEngine(delay=0.02)
    urgent = ({"json": {"input": TEXTS[:300], "priority": -2}} if how == "body"
              else {"json": {"input": TEXTS[:300]}, "headers": {"X-Priority": "-2"}})

    async def scenario():
        async with serve_async(fake, _config("fair")) as client:
            started = time.monotonic()
            plain = asyncio.ensure_future(_timed(client.post("/v1/embeddings", json={"input": TEXTS[300:600]})))
            await asyncio.sleep(0.02)
            first = asyncio.ensure_future(_timed(client.post("/v1/embeddings", **urgent)))
            (a, a_done), (b, b_done) = await first, await plain
            return a, b, a_done - started, b_done - started

    a, b, urgent_seconds, plain_seconds = asyncio.run(scenario())
    assert a.status_code == b.status_code == 200
    # Four fifths of each batch while both wait: it ends when the other is about 5/8 done.
    assert urgent_seconds < 0.8 * plain_seconds, (urgent_seconds, plain_seconds)


def test_a_priority_out_of_range_is_a_400_naming_it():
    async def scenario():
        async with serve_async(FakeEngine(), _config("fair")) as client:
            body = await client.post("/v1/embeddings", json={"input": "a", "priority": 11})
            header = await client.post("/v1/embeddings", json={"input": "a"}, headers={"X-Priority": "soon"})
            return body, header

    body, header = asyncio.run(scenario())
    assert assert_envelope(body, 400)["param"] == "priority"
    assert "X-Priority" in assert_envelope(header, 400)["message"]


def test_past_the_bound_a_bulk_request_is_refused_at_once_and_a_query_still_gets_in():
    fake = FakeEngine(delay=0.01)

    async def scenario():
        config = replace(_config("fair"), max_queued_tokens=20_000)
        async with serve_async(fake, config) as client:
            first = asyncio.ensure_future(client.post("/v1/embeddings", json={"input": TEXTS[:600]}))
            await asyncio.sleep(0.05)
            sent = time.monotonic()
            refused = await client.post("/v1/embeddings", json={"input": TEXTS[600:1000]})
            refused_in = time.monotonic() - sent
            query = await client.post("/v1/embeddings", json={"input": "a short query"})
            metrics = (await client.get("/metrics")).text
            return await first, refused, refused_in, query, metrics

    first, refused, refused_in, query, metrics = asyncio.run(scenario())
    assert first.status_code == 200 and query.status_code == 200
    assert assert_envelope(refused, 429, "rate_limit_exceeded")
    assert 1 <= int(refused.headers["retry-after"]) <= 60 and refused_in < 0.1
    assert sample(metrics, "rose_queue_bound_tokens") == 20_000
    assert sample(metrics, "rose_batch_budget_tokens") == 512  # the configured one: the fake chooses none
    assert sample(metrics, 'rose_requests_total{model="rose-test/fake-embedder",route="/v1/embeddings",'
                           'status="429"}') == 1


def test_metrics_show_the_queue_wait_and_tokens_of_each_size_class():
    fake = FakeEngine()

    async def scenario():
        async with serve_async(fake, _config("fair")) as client:
            for body in ({"input": "one"}, {"input": TEXTS[:10]}, {"input": TEXTS[:100]}):
                assert (await client.post("/v1/embeddings", json=body)).status_code == 200
            return (await client.get("/metrics")).text

    metrics = asyncio.run(scenario())
    for size in ("one", "small", "large"):
        labels = f'model="rose-test/fake-embedder",size="{size}"'
        assert sample(metrics, f"rose_request_queue_wait_seconds_count{{{labels}}}") == 1
        assert sample(metrics, f"rose_request_size_tokens_total{{{labels}}}") > 0
