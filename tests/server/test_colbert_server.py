"""A ColBERT model served by a real server process beside a dense embedder (`--model` repeated): a tiny
PyLate checkpoint (tests/support/colbert_checkpoints.py), its token vectors through /v1/embeddings in
query and document mode (its [MASK]s hidden as keys, PyLate's default), float and base64, equal to
PyLate's encode within 1e-4; the dense model still answers; what a ColBERT model cannot do is a 400 that
names what it serves. Its /v1/rerank is tests/server/test_colbert_rerank_server.py's."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from tests.conftest import ServerProcess, texts_with_edges
from tests.support.client_support import checked_server
from tests.support.colbert_checkpoints import PROJECTION_DIM, reference_vectors, save_colbert
from tests.support.helpers import MODEL, assert_envelope

pytestmark = pytest.mark.slow  # a real server process

COLBERT = "tiny-colbert"
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def colbert(tmp_path_factory):
    # attend_to_expansion_tokens false, PyLate's default: the queries' [MASK]s travel marked as hidden keys
    # (engine/contract/hidden_keys.py) from the front end through the arena and the queue to the engine.
    return save_colbert(tmp_path_factory.mktemp("colbert") / "colbert", query_length=12, document_length=40,
                        attend_to_expansion_tokens=False)


@pytest.fixture(scope="module")
def server(colbert) -> Iterator[ServerProcess]:
    # --long-inputs error is the embedders': the ColBERT model still cuts its long texts as PyLate does.
    yield from checked_server("--dtype", "float32", "--model", MODEL, "--model", f"{COLBERT}={colbert}",
                              "--max-batch-tokens", "1024", "--max-batch-seqs", "256", "--long-inputs", "error")


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return texts_with_edges(30, 10)


def _post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.url + path, json=body, timeout=60)


def _assert_same(got: list[np.ndarray], expected: list[np.ndarray]) -> None:
    assert len(got) == len(expected)
    for i, (ours, theirs) in enumerate(zip(got, expected)):
        assert ours.shape == theirs.shape, f"text {i}"
        np.testing.assert_allclose(ours, theirs, atol=TOLERANCE, rtol=0, err_msg=f"text {i}")


@pytest.mark.parametrize("side", ["query", "document"])
def test_token_vectors_equal_pylate(server, colbert, texts, side):
    r = _post(server, "/v1/embeddings", {"input": texts, "model": COLBERT, "input_type": side})
    assert r.status_code == 200, r.text
    data = r.json()["data"]
    assert {d["object"] for d in data} == {"multi_vector_embedding"}
    got = [np.asarray(d["embedding"], dtype=np.float32).reshape(-1, PROJECTION_DIM) for d in data]
    _assert_same(got, reference_vectors(colbert, texts, side == "query"))


def test_base64_is_the_float_answer(server, colbert, texts):
    body = {"input": texts[:5], "model": COLBERT, "prompt_name": "query", "encoding_format": "base64"}
    r = _post(server, "/v1/embeddings", body)
    assert r.status_code == 200, r.text
    got = [np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4").reshape(-1, PROJECTION_DIM)
           for d in r.json()["data"]]
    _assert_same(got, reference_vectors(colbert, texts[:5], True))


def test_documents_are_the_default_side(server, colbert, texts):
    r = _post(server, "/v1/embeddings", {"input": texts[:3], "model": COLBERT})
    assert r.status_code == 200, r.text
    got = [np.asarray(d["embedding"], dtype=np.float32).reshape(-1, PROJECTION_DIM) for d in r.json()["data"]]
    _assert_same(got, reference_vectors(colbert, texts[:3], False))


def test_a_large_request_in_several_parts_and_batches(server, colbert, texts):
    many = texts * 5  # parts of 16, 32 and 64 texts; batches of at most 256 token vectors
    r = _post(server, "/v1/embeddings", {"input": many, "model": COLBERT, "encoding_format": "base64"})
    assert r.status_code == 200, r.text
    got = [np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4").reshape(-1, PROJECTION_DIM)
           for d in r.json()["data"]]
    _assert_same(got, reference_vectors(colbert, texts, False) * 5)


def test_models_lists_its_kind(server):
    kinds = {m["id"]: m["kind"] for m in httpx.get(server.url + "/v1/models", timeout=10).json()["data"]}
    assert kinds[COLBERT] == "multi_vector_embedding" and kinds[MODEL] == "embedding"


def test_the_dense_model_still_answers(server, texts):
    r = _post(server, "/v1/embeddings", {"input": texts[:2]})
    assert r.status_code == 200, r.text
    assert len(r.json()["data"][0]["embedding"]) == 384


@pytest.mark.parametrize("body,param", [
    ({"dimensions": 8}, "dimensions"),
    ({"encoding_format": "int8"}, "encoding_format"),
    ({"input_type": "classification"}, "input_type"),
    ({"long_inputs": "chunk"}, "long_inputs"),
    ({"long_inputs": "error"}, "long_inputs"),
    ({"input": [[101, 102]]}, "input"),
])
def test_what_a_colbert_model_cannot_do_is_a_400(server, body, param):
    r = _post(server, "/v1/embeddings", {"input": ["a text"], "model": COLBERT, **body})
    assert assert_envelope(r, 400)["param"] == param


@pytest.mark.parametrize("path,body", [("/embed_sparse", {"inputs": ["a text"]}), ("/classify", {"input": ["a text"]})])
def test_a_route_of_another_kind_names_what_it_serves(server, path, body):
    r = _post(server, path, {**body, "model": COLBERT})
    assert "multi-vector (ColBERT)" in assert_envelope(r, 400, "model_is_multi_vector")["message"]
