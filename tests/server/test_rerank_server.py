"""Rerankers served by a real server process: Cohere's Python SDK unmodified, a Jina-style httpx call
and TEI's body against a tiny BERT cross-encoder (scores equal CrossEncoder.predict), /tokenize's
round trip, and a tiny Qwen3 reranker named by --model-kind against its model card."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import numpy as np
import pytest
import torch

from tests.support.client_support import checked_server, stop_and_check_no_server_error
from tests.conftest import ServerProcess, load_texts
from tests.support.reranker_checkpoints import qwen3_card_scores, save_cross_encoder, save_qwen3_reranker

pytestmark = pytest.mark.slow  # real server processes

NAME = "tiny-reranker"
TOLERANCE = 1e-4
QUERY = "How do I read a file line by line?"


@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory):
    return save_cross_encoder(tmp_path_factory.mktemp("rerank") / "bert", "bert")


@pytest.fixture(scope="module")
def server(cross_encoder) -> Iterator[ServerProcess]:
    yield from checked_server("--dtype", "float32", "--model", str(cross_encoder), "--served-model-name", NAME,
                              "--max-batch-tokens", "1024")


@pytest.fixture(scope="module")
def documents() -> list[str]:
    return load_texts(30)


@pytest.fixture(scope="module")
def expected(cross_encoder, documents) -> tuple[np.ndarray, np.ndarray]:
    """CrossEncoder.predict's scores and raw logits for (QUERY, document)."""
    from sentence_transformers import CrossEncoder

    reference = CrossEncoder(str(cross_encoder), device="cpu")
    pairs = [(QUERY, d) for d in documents]
    return reference.predict(pairs), reference.predict(pairs, activation_fn=torch.nn.Identity())


def test_cohere_sdk_v2(server, documents, expected):
    import cohere

    client = cohere.ClientV2(base_url=server.url, api_key="unused")
    response = client.rerank(model=NAME, query=QUERY, documents=documents, top_n=5)
    scores = expected[0]
    best = sorted(range(len(documents)), key=lambda i: -scores[i])[:5]
    assert [r.index for r in response.results] == best
    np.testing.assert_allclose([r.relevance_score for r in response.results], scores[best], atol=TOLERANCE, rtol=0)


def test_cohere_sdk_reports_a_bad_request(server, documents):
    import cohere

    client = cohere.ClientV2(base_url=server.url, api_key="unused")
    with pytest.raises(cohere.errors.BadRequestError) as caught:
        client.rerank(model=NAME, query=QUERY, documents=documents, top_n=0)
    assert caught.value.body["error"]["param"] == "top_n"


def test_jina_style_call(server, documents, expected):
    body = {"model": NAME, "query": QUERY, "documents": documents, "top_n": 3, "return_documents": True}
    r = httpx.post(server.url + "/v1/rerank", json=body, headers={"Authorization": "Bearer unused"}, timeout=60)
    assert r.status_code == 200, r.text
    answer = r.json()
    scores = expected[0]
    assert [res["index"] for res in answer["results"]] == sorted(range(len(documents)), key=lambda i: -scores[i])[:3]
    for res in answer["results"]:
        assert res["document"]["text"] == documents[res["index"]]
        assert abs(res["relevance_score"] - scores[res["index"]]) <= TOLERANCE
    assert answer["model"] == NAME and answer["usage"]["total_tokens"] > len(documents) * 3


def test_tei_body_raw_scores(server, documents, expected):
    r = httpx.post(server.url + "/rerank", json={"query": QUERY, "texts": documents, "raw_scores": True,
                                                 "truncate": True}, timeout=60)
    assert r.status_code == 200, r.text
    got = {rank["index"]: rank["score"] for rank in r.json()}
    np.testing.assert_allclose([got[i] for i in range(len(documents))], expected[1], atol=TOLERANCE, rtol=0)


def test_embeddings_from_a_reranker_are_refused(server):
    r = httpx.post(server.url + "/v1/embeddings", json={"input": "a"}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["code"] == "model_is_reranker"


def test_tokenize_round_trip(server):
    text = "Reading files, line by line."
    tokens = httpx.post(server.url + "/tokenize", json={"model": NAME, "prompt": text}, timeout=30).json()
    assert tokens["count"] == len(tokens["tokens"]) and tokens["max_model_len"] == 128
    prompt = httpx.post(server.url + "/detokenize", json={"tokens": tokens["tokens"]}, timeout=30).json()["prompt"]
    assert prompt == "[CLS] reading files, line by line. [SEP]"


def test_qwen3_reranker_named_by_the_flag(tmp_path_factory):
    path = save_qwen3_reranker(tmp_path_factory.mktemp("qwen3") / "model", marked=False)
    documents = load_texts(12)
    proc = ServerProcess("--dtype", "float32", "--model", str(path), "--model-kind", "rerank", "--max-seq-len", "256")
    try:
        r = httpx.post(proc.url + "/v2/rerank", json={"query": QUERY, "documents": documents}, timeout=60)
        assert r.status_code == 200, r.text
        got = {res["index"]: res["relevance_score"] for res in r.json()["results"]}
    finally:
        stop_and_check_no_server_error(proc)
    expected = qwen3_card_scores(path, QUERY, documents, 256)
    np.testing.assert_allclose([got[i] for i in range(len(documents))], expected, atol=TOLERANCE, rtol=0)
