"""Several models served by one real server process: a tiny sentence-transformers embedder and a
tiny BERT cross-encoder (`--model NAME=PATH` naming it) on one engine process, one queue.
Embeddings equal SentenceTransformer.encode's and scores CrossEncoder.predict's, also while
requests to both interleave; /v1/models, /health and the 404 name both; a model whose weights do
not load stops the server with an error that names it."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

from tests.support.client_support import checked_server
from tests.conftest import ServerProcess, load_texts
from tests.support.reranker_checkpoints import save_cross_encoder
from tests.support.st_checkpoints import bert_tokenizer, load_reference, save_architecture, tiny_bert_config

pytestmark = pytest.mark.slow  # real server processes

RANKER = "tiny-ranker"
QUERY = "How do I read a file line by line?"
MIN_COSINE = 0.99999  # float32 against float32, as tests/models/test_architectures.py
SCORE_TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> tuple:
    root = tmp_path_factory.mktemp("several")
    return (save_architecture(root / "embedder", bert_tokenizer, tiny_bert_config),
            save_cross_encoder(root / "ranker", "bert"))


@pytest.fixture(scope="module")
def server(checkpoints) -> Iterator[ServerProcess]:
    embedder, ranker = checkpoints
    yield from checked_server("--dtype", "float32", "--model", str(embedder), "--model", f"{RANKER}={ranker}",
                              "--max-batch-tokens", "1024")


@pytest.fixture(scope="module")
def references(checkpoints):
    from sentence_transformers import CrossEncoder

    embedder, ranker = checkpoints
    return load_reference(embedder), CrossEncoder(str(ranker), device="cpu")


def _embed(server, texts, model=None) -> np.ndarray:
    body = {"input": texts, **({"model": model} if model else {})}
    r = httpx.post(server.url + "/v1/embeddings", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return np.array([d["embedding"] for d in r.json()["data"]], dtype=np.float32)


def _rerank(server, documents) -> np.ndarray:
    r = httpx.post(server.url + "/v2/rerank", json={"model": RANKER, "query": QUERY, "documents": documents},
                   timeout=60)
    assert r.status_code == 200, r.text
    by_index = {res["index"]: res["relevance_score"] for res in r.json()["results"]}
    return np.array([by_index[i] for i in range(len(documents))])


def _check_vectors(got: np.ndarray, texts, reference) -> None:
    expected = reference.encode(texts, normalize_embeddings=True)
    cosines = np.sum(got * expected, axis=1) / np.linalg.norm(got, axis=1) / np.linalg.norm(expected, axis=1)
    assert got.shape == expected.shape and cosines.min() >= MIN_COSINE, cosines.min()


def _check_scores(got: np.ndarray, documents, reference) -> None:
    np.testing.assert_allclose(got, reference.predict([(QUERY, d) for d in documents]), atol=SCORE_TOLERANCE, rtol=0)


def test_each_model_answers_as_its_reference(server, checkpoints, references):
    texts = load_texts(20)
    _check_vectors(_embed(server, texts, checkpoints[0].name), texts, references[0])
    _check_vectors(_embed(server, texts), texts, references[0])  # no model named: the first
    _check_scores(_rerank(server, texts), texts, references[1])


def test_requests_to_both_models_interleave(server, references):
    texts = load_texts(60)
    jobs = [(i % 2, texts[i:i + 25]) for i in range(16)]
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda job: (_rerank if job[0] else _embed)(server, job[1]), jobs))
    for (is_rerank, chunk), got in zip(jobs, answers):
        if is_rerank:
            _check_scores(got, chunk, references[1])
        else:
            _check_vectors(got, chunk, references[0])


def test_models_health_and_404_name_both(server, checkpoints):
    embedder = checkpoints[0].name
    listed = httpx.get(server.url + "/v1/models", timeout=30).json()["data"]
    assert [(m["id"], m["kind"]) for m in listed] == [(embedder, "embedding"), (RANKER, "rerank")]
    (engine,) = httpx.get(server.url + "/health", timeout=30).json()["engines"]
    held = {m["id"]: m["weights_bytes"] for m in engine["models"]}
    assert set(held) == {embedder, RANKER} and all(n > 100_000 for n in held.values())  # float32 weights
    r = httpx.post(server.url + "/v1/embeddings", json={"input": "a", "model": "nope"}, timeout=30)
    assert r.status_code == 404 and f"'{embedder}', '{RANKER}'" in r.json()["error"]["message"]
    assert f"model {RANKER} (rerank) ready on cpu (float32)" in server.log_path.read_text()


def test_a_model_that_does_not_load_is_named(checkpoints, tmp_path):
    broken = tmp_path / "broken-ranker"
    shutil.copytree(checkpoints[1], broken)
    (broken / "model.safetensors").write_bytes(b"not weights")
    proc = ServerProcess("--dtype", "float32", "--model", str(checkpoints[0]), "--model", str(broken),
                         wait_ready=False)
    try:
        assert proc.proc.wait(120) == 1
    finally:
        proc.stop()
    log = proc.log_path.read_text()
    assert f"model {broken} could not be loaded on cpu beside 1 model(s)" in log, log[-3000:]
