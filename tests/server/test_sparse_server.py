"""Sparse encoders served by a real server process beside a dense embedder (`--model` repeated):
a tiny SPLADE saved by SparseEncoder.save, its pairs through POST /embed_sparse and /v1/embeddings
equal to `SparseEncoder.encode` within 1e-4 with the same indices, tokens by `return_text` as its
tokenizer spells them; a tiny inference-free encoder (a Router), its queries as encode_query's and
its documents as encode_document's; the dense model still answers /v1/embeddings; each route
refuses the other kind of model by name."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from tests.conftest import ServerProcess, load_texts
from tests.support.client_support import checked_server
from tests.support.helpers import MODEL, assert_envelope
from tests.support.sparse_checkpoints import reference_pairs, save_inference_free, save_sparse_encoder

pytestmark = pytest.mark.slow  # a real server process

SPARSE = "tiny-splade"
INFERENCE_FREE = "tiny-inference-free"
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def splade(tmp_path_factory):
    return save_sparse_encoder(tmp_path_factory.mktemp("sparse") / "splade", pooling="sum")


@pytest.fixture(scope="module")
def inference_free(tmp_path_factory):
    return save_inference_free(tmp_path_factory.mktemp("sparse") / "inference-free")


@pytest.fixture(scope="module")
def server(splade, inference_free) -> Iterator[ServerProcess]:
    # Few sequences a batch: the arena's rows are as wide as the sparse model's.
    yield from checked_server("--dtype", "float32", "--model", MODEL, "--model", f"{SPARSE}={splade}",
                              "--model", f"{INFERENCE_FREE}={inference_free}", "--max-batch-tokens", "1024",
                              "--max-batch-seqs", "64")


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return [*load_texts(40), " ".join(load_texts(30))]


def _post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.url + path, json=body, timeout=60)


def _assert_pairs(got, expected) -> None:
    assert len(got) == len(expected)
    for i, ((indices, values), (want_indices, want_values)) in enumerate(zip(got, expected)):
        assert indices == want_indices.tolist(), f"text {i}: other indices"
        np.testing.assert_allclose(values, want_values, atol=TOLERANCE, rtol=0, err_msg=f"text {i}")


def test_embed_sparse_equals_sparse_encoder(server, splade, texts):
    r = _post(server, "/embed_sparse", {"inputs": texts, "truncate": True})
    assert r.status_code == 200, r.text
    got = [([p["index"] for p in pairs], [p["value"] for p in pairs]) for pairs in r.json()]
    _assert_pairs(got, reference_pairs(splade, texts))


def test_v1_embeddings_serves_both_models(server, splade, texts):
    r = _post(server, "/v1/embeddings", {"input": texts[:5], "model": SPARSE, "return_text": True})
    assert r.status_code == 200, r.text
    data = [d["embedding"] for d in r.json()["data"]]
    _assert_pairs([(d["indices"], d["values"]) for d in data], reference_pairs(splade, texts[:5]))
    from sentence_transformers import SparseEncoder

    tokenizer = SparseEncoder(str(splade), device="cpu").tokenizer
    assert [d["tokens"] for d in data] == [tokenizer.convert_ids_to_tokens(d["indices"]) for d in data]
    dense = _post(server, "/v1/embeddings", {"input": texts[:2]})
    assert dense.status_code == 200 and dense.json()["model"] == MODEL
    assert len(dense.json()["data"][0]["embedding"]) == 384


def test_inference_free_queries_by_lookup_and_documents_by_the_model(server, inference_free, texts):
    for body, task in (({"input_type": "search_query"}, "query"), ({}, "document")):
        r = _post(server, "/v1/embeddings", {"input": texts[:8], "model": INFERENCE_FREE, **body})
        assert r.status_code == 200, r.text
        got = [(d["embedding"]["indices"], d["embedding"]["values"]) for d in r.json()["data"]]
        _assert_pairs(got, reference_pairs(inference_free, texts[:8], task=task))


def test_each_route_refuses_the_other_kind(server):
    error = assert_envelope(_post(server, "/embed_sparse", {"inputs": "a", "model": MODEL}), 400, "model_is_embedder")
    assert "/v1/embeddings" in error["message"] and "SPLADE" in error["message"]
    error = assert_envelope(_post(server, "/embed", {"inputs": "a", "model": SPARSE}), 400, "model_is_sparse")
    assert "/embed_sparse" in error["message"]
