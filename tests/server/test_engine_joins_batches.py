"""An engine process's one queue (engine/queue/piece_queue.py) batches the pieces that several
front ends sent it meanwhile into one device batch, hands each front end its own vectors, and
still fails only the piece that raised."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

from rose_embed.engine.rose.cpu_features import native_bf16
from tests.conftest import ServerProcess
from tests.support.fault_plugins import RAISE_ID
from tests.support.helpers import MODEL, PLUGIN, embed, metric, sample

pytestmark = pytest.mark.slow  # three front ends and an engine process

FRONT_ENDS = 3
# A vector computed in a joined batch against the same text's alone: equal but for rounding. In
# bf16 (the default dtype on a CPU that computes it natively) the batch's other rows change how the
# GEMMs block and so where bf16 rounds: 1e-5 of cosine apart. Another piece's vector is far further.
SAME_VECTOR_COSINE = 0.9999 if native_bf16() else 0.99999
DEVICE_BATCHES = 'rose_engine_batches_total{device="cpu",engine="0"}'  # what the engine ran


@pytest.fixture(scope="module")
def slow_engine():
    # Each device batch takes 0.3 s more, so that the front ends' batches wait at the engine together.
    proc = ServerProcess(*PLUGIN, "--devices", "cpu", "--frontend-workers", str(FRONT_ENDS),
                         "--max-batch-tokens", "1024", "--max-batch-seqs", "64", env={"ROSE_FAULT_DELAY_S": "0.3"})
    deadline = time.monotonic() + 60
    while [f["state"] for f in httpx.get(proc.url + "/health", timeout=10).json()["frontends"]] != ["serving"] * 3:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    yield proc
    proc.stop()


def _burst(url: str, bodies: list[dict], routes: list[str] | None = None) -> list[httpx.Response]:
    """A request that keeps the engine busy, then every body at once (to /v1/embeddings, or to
    its route in `routes`), each on a fresh connection (the kernel spreads connections over the
    front ends)."""
    routes = routes or ["/v1/embeddings"] * len(bodies)
    with ThreadPoolExecutor(len(bodies) + 1) as pool:
        blocker = pool.submit(embed, url, {"input": ["keeps the engine busy"], "model": MODEL})
        time.sleep(0.1)
        responses = list(pool.map(lambda route, body: httpx.post(url + route, json=body, timeout=60), routes, bodies))
        assert blocker.result().status_code == 200
    return responses


def _device_batches(url: str) -> float:
    """The batches the engine has run so far, off its board (whichever front end answers)."""
    return sample(httpx.get(url + "/metrics", timeout=10).text, DEVICE_BATCHES)


def test_batches_of_several_front_ends_run_as_one_and_each_gets_its_own_vectors(slow_engine):
    texts = [f"joined text {i} of the burst" for i in range(24)]
    before = _device_batches(slow_engine.url)
    responses = _burst(slow_engine.url, [{"input": [text], "model": MODEL} for text in texts])
    assert [r.status_code for r in responses] == [200] * len(texts)
    assert len({r.headers["x-rose-worker"] for r in responses}) >= 2  # several front ends sent pieces
    ran = _device_batches(slow_engine.url) - before - 1  # less the request that kept the engine busy
    assert ran <= len(texts) / 4, ran  # the pieces that waited together ran together
    got = np.asarray([r.json()["data"][0]["embedding"] for r in responses], np.float32)
    alone = embed(slow_engine.url, {"input": texts, "model": MODEL}).json()["data"]  # one front end's batch
    want = np.asarray([d["embedding"] for d in alone], np.float32)
    cos = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert cos.min() >= SAME_VECTOR_COSINE


def test_a_joined_batch_that_raises_fails_only_the_piece_that_held_the_fault(slow_engine):
    bodies = [{"input": [f"beside the fault {i}"], "model": MODEL} for i in range(11)]
    bodies.insert(5, {"input": [[101, RAISE_ID, 102]], "model": MODEL})
    failed_before = metric(slow_engine.url, "rose_batches_failed_total")
    responses = _burst(slow_engine.url, bodies)
    faulty = responses[5]
    assert faulty.status_code == 500
    # Every other request was joined with it at the engine, and must not fail with it: the
    # batch that raised ran again piece by piece.
    others = responses[:5] + responses[6:]
    assert all(r.status_code == 200 for r in others), [r.status_code for r in others]
    assert len({r.headers["x-rose-worker"] for r in responses}) >= 2
    time.sleep(1.0)
    assert metric(slow_engine.url, "rose_batches_failed_total") - failed_before == 1


def _chunk_vectors(response: httpx.Response) -> np.ndarray:
    assert response.status_code == 200, response.text
    return np.asarray([c["embedding"] for d in response.json()["data"] for c in d["data"]], np.float32)


def test_late_chunked_documents_joined_with_plain_texts_keep_their_own_chunks(slow_engine):
    """A contextualized request pools several vectors per sequence: joined with other front
    ends' batches, each chunk must still get the vector of its own tokens."""
    documents = [[f"Document {i} opens here.", f"Its middle part, number {i}.", "And it ends."] for i in range(4)]
    texts = [f"a plain text beside the documents, {i}" for i in range(8)]
    routes = ["/v1/contextualizedembeddings"] * len(documents) + ["/v1/embeddings"] * len(texts)
    bodies = [{"input": [d], "model": MODEL} for d in documents] + [{"input": [t], "model": MODEL} for t in texts]
    burst = _burst(slow_engine.url, bodies, routes)
    alone = [httpx.post(slow_engine.url + route, json=body, timeout=60) for route, body in zip(routes, bodies)]
    for joined, single in zip(burst, alone):
        if "contextualized" in str(joined.url):
            got, want = _chunk_vectors(joined), _chunk_vectors(single)
        else:
            got = np.asarray([d["embedding"] for d in joined.json()["data"]], np.float32)
            want = np.asarray([d["embedding"] for d in single.json()["data"]], np.float32)
        assert got.shape == want.shape
        cos = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
        assert cos.min() >= SAME_VECTOR_COSINE
