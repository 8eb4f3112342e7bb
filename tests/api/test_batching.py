"""The engine's queue behind HTTP: shared batches across requests, no crossed results, token budget respected."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx

import numpy as np
import pytest
import uvicorn

from rose_embed.engine.contract.batch import cut_batches
from rose_embed.engine.contract.config import EngineConfig
from rose_embed.server.app import create_app
from rose_embed.server.config import ServerConfig
from tests.conftest import free_port
from tests.support.fake_engine import FakeEngine

BUDGET = 512


def test_cut_batches_respects_both_caps():
    lengths = [5, 100, 200, 300, 7, 7, 7, 7, 256]
    ranges = cut_batches(lengths, max_tokens=310, max_seqs=3)
    assert ranges[0][0] == 0 and ranges[-1][1] == len(lengths)
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))  # contiguous, in order
    for lo, hi in ranges:
        assert sum(lengths[lo:hi]) <= 310 and hi - lo <= 3


def _run_concurrent(engine, requests: list[list[str]], on_ready=lambda: None):
    """Serve the app with uvicorn in a thread (real HTTP, real concurrency); the responses."""
    app = create_app(ServerConfig(engine=EngineConfig(dtype="float32", max_batch_tokens=BUDGET, max_batch_seqs=64)), engine)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.config.port}/v1/embeddings"
    # The port opens only once uvicorn has started; on a busy machine that may take a while.
    for _ in range(600):
        if server.started or not thread.is_alive():
            break
        time.sleep(0.05)

    async def drive():
        async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=256)) as client:
            while (await client.get(url.replace("/v1/embeddings", "/health"))).status_code != 200:
                await asyncio.sleep(0.05)
            on_ready()  # warmed up
            return await asyncio.gather(
                *[client.post(url, json={"input": texts, "encoding_format": "float"}) for texts in requests]
            )

    try:
        responses = asyncio.run(drive())
    finally:
        server.should_exit = True
        thread.join(30)
    return responses


def _concurrent_requests(texts: list[str], num_requests: int) -> list[list[str]]:
    """Requests of 1..6 texts each, all to be in flight at once."""
    rng = np.random.default_rng(0)
    requests, cursor = [], 0
    for _ in range(num_requests):
        n = int(rng.integers(1, 7))
        requests.append(texts[cursor : cursor + n])
        cursor += n
    return requests


def _check_shared_batches(engine, requests: list[list[str]], atol: float) -> None:
    batches: list[tuple[int, int]] = []  # (sequences, tokens) of every batch the engine ran once warm
    execute_packed, is_warm = engine.execute_packed, []

    def recorded(batch):
        if is_warm:
            batches.append((batch.num_seqs, batch.num_tokens))
        return execute_packed(batch)

    engine.execute_packed = recorded
    try:
        responses = _run_concurrent(engine, requests, on_ready=lambda: is_warm.append(True))
    finally:
        del engine.execute_packed
    reference = engine.embed([t for r in requests for t in r])
    offset = 0
    for request_texts, response in zip(requests, responses):
        assert response.status_code == 200, response.text
        data = response.json()["data"]
        assert [d["index"] for d in data] == list(range(len(request_texts)))
        got = np.array([d["embedding"] for d in data], dtype=np.float32)
        np.testing.assert_allclose(got, reference[offset : offset + len(request_texts)], atol=atol, rtol=0)
        offset += len(request_texts)

    assert sum(n for n, _ in batches) >= offset  # every input was computed (warm-up excluded)
    assert all(tokens <= BUDGET for _, tokens in batches)
    # A request holds at most 6 texts: a batch of more held several requests' (at least 3 past 12).
    assert max(n for n, _ in batches) > 12, "batches did not form across requests"


def test_concurrent_requests_share_batches_and_get_their_own_vectors(texts):
    """The queue and the HTTP path on the fake engine: no crossed or reordered results."""
    # Each batch takes long enough that requests queue behind it even where a busy machine sends
    # them slowly: batches then form across requests, as under real load.
    _check_shared_batches(FakeEngine(delay=0.05), _concurrent_requests(texts, 200), atol=1e-6)


def test_real_engine_vectors_do_not_depend_on_batch_neighbours(default_engine, texts):
    # Same texts, other batch neighbours: equal up to float summation order. Fewer requests than on
    # the fake: that the batcher routes every result right is checked there.
    _check_shared_batches(default_engine, _concurrent_requests(texts, 60), atol=2e-5)


@pytest.fixture(scope="module")
def budget_sample(default_engine, texts) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The texts each budget embeds, and the default engine's vectors of them, as one list and of
    the first 8 as a list of their own (the same for every budget)."""
    sample = texts[:64]
    return sample, default_engine.embed(sample), default_engine.embed(sample[:8])


@pytest.mark.parametrize("budget", [300, 1000])
def test_engine_embed_matches_across_budgets(budget_sample, budget):
    # The same text gives the same vector whatever batch it lands in.
    from rose_embed.engine.rose.engine import Engine

    small = Engine(EngineConfig(dtype="float32", max_batch_tokens=budget))
    sample, whole, first = budget_sample
    np.testing.assert_allclose(small.embed(sample), whole, atol=2e-5)
    alone = np.stack([small.embed([t])[0] for t in sample[:8]])
    np.testing.assert_allclose(alone, first, atol=2e-5)
