"""/v1/rerank, /v2/rerank and /rerank on a fake reranker, in process: the shapes of Cohere's, Jina's
and TEI's answers, scores equal to the fake's one-pair-at-a-time reference, and every bad request
in OpenAI's envelope with a 4xx (tests/support/fake_reranker.py)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import load_texts
from tests.support.fake_engine import FAKE_MODEL, FakeEngine, fake_config, serve
from tests.support.fake_reranker import FAKE_RERANKER, FakeReranker
from tests.support.helpers import assert_envelope

QUERY = "How do I read a file line by line?"
MAX_DOCUMENTS = 200


@pytest.fixture(scope="module")
def fake() -> FakeReranker:
    return FakeReranker()


@pytest.fixture(scope="module")
def client(fake):
    with serve(fake, fake_config(max_rerank_documents=MAX_DOCUMENTS)) as client:
        yield client


@pytest.fixture(scope="module")
def documents() -> list[str]:
    return load_texts(12)


def _ranked(expected: np.ndarray) -> list[int]:
    return sorted(range(len(expected)), key=lambda i: -expected[i])


@pytest.mark.parametrize("path", ["/v1/rerank", "/v2/rerank", "/rerank"])
def test_cohere_shape_sorted_with_original_indices(client, fake, documents, path):
    r = client.post(path, json={"model": FAKE_RERANKER, "query": QUERY, "documents": documents})
    assert r.status_code == 200, r.text
    body = r.json()
    expected = fake.scores_of(QUERY, documents)[:, 0]
    results = body["results"]
    assert [res["index"] for res in results] == _ranked(expected)
    np.testing.assert_allclose([res["relevance_score"] for res in results], np.sort(expected)[::-1], atol=1e-6)
    assert all("document" not in res for res in results)  # only when asked
    assert body["model"] == FAKE_RERANKER and body["id"]
    assert body["usage"]["total_tokens"] == fake.num_tokens(QUERY, documents)
    assert body["meta"]["api_version"]["version"] == ("2" if path.startswith("/v2") else "1")


def test_documents_as_objects_top_n_and_return_documents(client, fake, documents):
    r = client.post("/v1/rerank", json={"query": QUERY, "documents": [{"text": d} for d in documents], "top_n": 3,
                                        "return_documents": True})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    best = _ranked(fake.scores_of(QUERY, documents)[:, 0])[:3]
    assert [res["index"] for res in results] == best
    assert [res["document"]["text"] for res in results] == [documents[i] for i in best]


def test_top_n_past_the_documents_returns_them_all(client, documents):
    r = client.post("/v1/rerank", json={"query": QUERY, "documents": documents[:4], "top_n": 10})
    assert sorted(res["index"] for res in r.json()["results"]) == [0, 1, 2, 3]


def test_max_tokens_per_doc_cuts_documents(client, fake, documents):
    r = client.post("/v2/rerank", json={"query": QUERY, "documents": documents, "max_tokens_per_doc": 5})
    expected = fake.scores_of(QUERY, documents, max_doc_tokens=5)[:, 0]
    got = {res["index"]: res["relevance_score"] for res in r.json()["results"]}
    np.testing.assert_allclose([got[i] for i in range(len(documents))], expected, atol=1e-6)
    assert not np.allclose(expected, fake.scores_of(QUERY, documents)[:, 0])


def test_many_documents_cross_parts_and_keep_their_indices(client, fake):
    documents = load_texts(MAX_DOCUMENTS)
    r = client.post("/v1/rerank", json={"query": QUERY, "documents": documents})
    got = {res["index"]: res["relevance_score"] for res in r.json()["results"]}
    np.testing.assert_allclose([got[i] for i in range(len(documents))], fake.scores_of(QUERY, documents)[:, 0],
                               atol=1e-6)


def test_tei_body_gets_tei_answer(client, fake, documents):
    short = [d[:80] for d in documents]
    r = client.post("/rerank", json={"query": QUERY, "texts": short, "return_text": True})
    assert r.status_code == 200, r.text
    ranks = r.json()
    assert isinstance(ranks, list)
    expected = fake.scores_of(QUERY, short)
    assert [rank["index"] for rank in ranks] == _ranked(expected[:, 0])
    np.testing.assert_allclose([rank["score"] for rank in ranks], np.sort(expected[:, 0])[::-1], atol=1e-6)
    assert [rank["text"] for rank in ranks] == [short[rank["index"]] for rank in ranks]
    raw = client.post("/rerank", json={"query": QUERY, "texts": short, "raw_scores": True}).json()
    assert all("text" not in rank for rank in raw)
    np.testing.assert_allclose(sorted(rank["score"] for rank in raw), np.sort(expected[:, 1]), atol=1e-6)


def test_tei_over_long_pair_needs_truncate(client, fake):
    long_text = " ".join(load_texts(40))
    error = assert_envelope(client.post("/rerank", json={"query": QUERY, "texts": ["short", long_text]}), 400,
                            "context_length_exceeded")
    assert error["param"] == "texts" and "texts[1]" in error["message"] and "truncate" in error["message"]
    ok = client.post("/rerank", json={"query": QUERY, "texts": ["short", long_text], "truncate": True})
    assert ok.status_code == 200 and len(ok.json()) == 2


BAD = [
    # (name, path, body, status, param, code)
    ("no documents", "/v1/rerank", {"query": QUERY, "documents": []}, 400, "documents", None),
    ("documents missing", "/v1/rerank", {"query": QUERY}, 400, "documents", None),
    ("too many documents", "/v1/rerank", {"query": QUERY, "documents": ["a"] * (MAX_DOCUMENTS + 1)}, 400, "documents",
     "too_many_documents"),
    ("top_n zero", "/v1/rerank", {"query": QUERY, "documents": ["a"], "top_n": 0}, 400, "top_n", None),
    ("top_n negative", "/v2/rerank", {"query": QUERY, "documents": ["a"], "top_n": -2}, 400, "top_n", None),
    ("top_n not a number", "/v2/rerank", {"query": QUERY, "documents": ["a"], "top_n": "3"}, 400, "top_n", None),
    ("max_tokens_per_doc zero", "/v2/rerank", {"query": QUERY, "documents": ["a"], "max_tokens_per_doc": 0}, 400,
     "max_tokens_per_doc", None),
    ("query missing", "/v1/rerank", {"documents": ["a"]}, 400, "query", None),
    ("document of a wrong type", "/v1/rerank", {"query": QUERY, "documents": [3]}, 400, "documents", None),
    ("TEI body off /rerank", "/v1/rerank", {"query": QUERY, "texts": ["a"]}, 400, "documents", None),
    ("both documents and texts", "/rerank", {"query": QUERY, "texts": ["a"], "documents": ["a"]}, 400, "documents",
     None),
    ("left truncation", "/rerank", {"query": QUERY, "texts": ["a"], "truncation_direction": "Left"}, 400,
     "truncation_direction", None),
    ("unknown model", "/v1/rerank", {"model": "rerank-v3.5", "query": QUERY, "documents": ["a"]}, 404, "model",
     "model_not_found"),
    ("a reranker asked for embeddings", "/v1/embeddings", {"input": "a"}, 400, "model", "model_is_reranker"),
    ("a reranker asked to late-chunk", "/v1/contextualizedembeddings", {"inputs": [["a", "b"]]}, 400, "model",
     "model_is_reranker"),
]


@pytest.mark.parametrize("name,path,body,status,param,code", BAD, ids=[b[0] for b in BAD])
def test_bad_requests_get_the_envelope(client, fake, name, path, body, status, param, code):
    error = assert_envelope(client.post(path, json=body), status, code)
    assert error["param"] == param
    # The request harmed nothing: the next one is answered as ever.
    r = client.post("/v1/rerank", json={"query": QUERY, "documents": ["one", "two"]})
    assert r.status_code == 200 and len(r.json()["results"]) == 2


def test_unknown_model_lists_the_served_one(client):
    error = assert_envelope(client.post("/v1/rerank", json={"model": "nope", "query": QUERY, "documents": ["a"]}), 404)
    assert FAKE_RERANKER in error["message"]


def test_an_embedder_asked_to_rerank_says_so():
    with serve(FakeEngine()) as client:
        error = assert_envelope(client.post("/v1/rerank", json={"query": QUERY, "documents": ["a"]}), 400,
                                "model_is_embedder")
        assert error["param"] == "model" and FAKE_MODEL in error["message"]
        assert client.post("/v1/embeddings", json={"input": "still fine"}).status_code == 200


def test_openapi_publishes_the_bodies_these_routes_decode(client):
    """The routes decode their bodies themselves; the document must still show what they take."""
    schema = client.get("/docs/openapi.json").json()
    bodies = {path: schema["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
              for path in ("/v1/rerank", "/v2/rerank", "/rerank", "/tokenize", "/detokenize")}
    for path in ("/v1/rerank", "/v2/rerank", "/rerank"):
        assert {"query", "documents", "texts", "top_n", "return_documents", "max_tokens_per_doc"} <= set(
            bodies[path]["properties"]) and bodies[path]["required"] == ["query"]
    assert bodies["/tokenize"]["required"] == ["prompt"] and bodies["/detokenize"]["required"] == ["tokens"]
