"""A ColBERT model reranking at /v1/rerank, /v2/rerank and /rerank (Cohere's, Jina's and TEI's shapes),
served by a real server process beside a tiny cross-encoder: each document's score is the MaxSim of
the query's token vectors against the document's, computed on the engine, equal to PyLate's
colbert_scores over the reference transcription of its encode (tests/support/colbert_checkpoints.py)
within 1e-4 in float32. A small batch budget puts a request's documents in many groups, pieces and
batches; a long query is cut at query_length; what the cross-encoder's route refuses, it refuses
alike for the ColBERT model."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.conftest import ServerProcess, load_texts
from tests.support.client_support import checked_server
from tests.support.colbert_checkpoints import maxsim, reference_vectors, save_colbert
from tests.support.helpers import assert_envelope, metric
from tests.support.reranker_checkpoints import save_cross_encoder

pytestmark = pytest.mark.slow  # a real server process

COLBERT = "tiny-colbert"
CROSS_ENCODER = "tiny-cross-encoder"
QUERY_LENGTH = 12
TOLERANCE = 1e-4
QUERY = "How do I read a file line by line?"


@pytest.fixture(scope="module")
def colbert(tmp_path_factory) -> Path:
    return save_colbert(tmp_path_factory.mktemp("colbert") / "colbert", query_length=QUERY_LENGTH,
                        document_length=40)


@pytest.fixture(scope="module")
def server(colbert, tmp_path_factory) -> Iterator[ServerProcess]:
    cross_encoder = save_cross_encoder(tmp_path_factory.mktemp("rerank") / "bert", "bert")
    # 512 tokens and 48 sequences a batch (a document's 40 token vectors fit /v1/embeddings' batch): a
    # group is the query and the documents of 500 tokens or fewer, a batch one group or two.
    yield from checked_server("--dtype", "float32", "--model", f"{CROSS_ENCODER}={cross_encoder}",
                              "--model", f"{COLBERT}={colbert}", "--max-batch-tokens", "512", "--max-batch-seqs", "48")


@pytest.fixture(scope="module")
def documents() -> list[str]:
    return [*load_texts(30), "", "Hello, world!!! (yes).", "?!", " ".join(load_texts(8))]


def _expected(colbert: Path, query: str, documents: list[str]) -> np.ndarray:
    """colbert_scores of the query against each document, over PyLate's vectors."""
    return maxsim(reference_vectors(colbert, [query], True)[0], reference_vectors(colbert, documents, False))


def _post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.url + path, json=body, timeout=120)


def _best(scores: np.ndarray, top_n: int | None = None) -> list[int]:
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    return order if top_n is None else order[:top_n]


@pytest.mark.parametrize("path", ["/v1/rerank", "/v2/rerank"])
def test_cohere_and_jina_shapes_score_by_maxsim(server, colbert, documents, path):
    r = _post(server, path, {"model": COLBERT, "query": QUERY, "documents": documents})
    assert r.status_code == 200, r.text
    body = r.json()
    expected = _expected(colbert, QUERY, documents)
    results = body["results"]
    assert sorted(res["index"] for res in results) == list(range(len(documents)))
    got = np.array([res["relevance_score"] for res in sorted(results, key=lambda res: res["index"])])
    np.testing.assert_allclose(got, expected, atol=TOLERANCE, rtol=0)
    scores = [res["relevance_score"] for res in results]
    assert scores == sorted(scores, reverse=True)
    assert all("document" not in res for res in results)
    assert body["model"] == COLBERT and body["usage"]["total_tokens"] > 0
    assert body["meta"]["api_version"]["version"] == ("2" if path.startswith("/v2/") else "1")


def test_top_n_and_return_documents(server, colbert, documents):
    objects = [{"text": d} for d in documents]  # Cohere v1's and Jina's documents
    r = _post(server, "/v1/rerank", {"model": COLBERT, "query": QUERY, "documents": objects, "top_n": 4,
                                     "return_documents": True})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    expected = _expected(colbert, QUERY, documents)
    assert [res["index"] for res in results] == _best(expected, 4)
    assert [res["document"]["text"] for res in results] == [documents[i] for i in _best(expected, 4)]
    np.testing.assert_allclose([res["relevance_score"] for res in results], expected[_best(expected, 4)],
                               atol=TOLERANCE, rtol=0)


def test_tei_shape_on_rerank(server, colbert, documents):
    expected = _expected(colbert, QUERY, documents)
    for raw_scores in (False, True):  # MaxSim has no activation: the raw score is the score
        r = _post(server, "/rerank", {"model": COLBERT, "query": QUERY, "texts": documents, "raw_scores": raw_scores,
                                      "return_text": True})
        assert r.status_code == 200, r.text
        ranks = r.json()
        assert [rank["index"] for rank in ranks] == _best(expected)
        assert [rank["text"] for rank in ranks] == [documents[i] for i in _best(expected)]
        np.testing.assert_allclose([rank["score"] for rank in ranks], expected[_best(expected)], atol=TOLERANCE,
                                   rtol=0)


def test_many_documents_span_parts_groups_and_batches(server, colbert, documents):
    many = documents * 6  # 204 documents: parts of 16, 32, 64 and more, a dozen groups and batches at least
    batches = metric(server.url, "rose_eager_runs_total")  # every batch on the CPU
    r = _post(server, "/v2/rerank", {"model": COLBERT, "query": QUERY, "documents": many})
    assert r.status_code == 200, r.text
    assert metric(server.url, "rose_eager_runs_total") - batches >= 10
    results = sorted(r.json()["results"], key=lambda res: res["index"])
    assert len(results) == len(many)
    expected = np.tile(_expected(colbert, QUERY, documents), 6)
    np.testing.assert_allclose([res["relevance_score"] for res in results], expected, atol=TOLERANCE, rtol=0)


def test_a_long_query_is_cut_at_query_length(server, colbert, documents):
    query = " ".join(load_texts(5))  # far past 12 tokens
    r = _post(server, "/v1/rerank", {"model": COLBERT, "query": query, "documents": documents[:10]})
    assert r.status_code == 200, r.text
    results = sorted(r.json()["results"], key=lambda res: res["index"])
    assert len(reference_vectors(colbert, [query], True)[0]) == QUERY_LENGTH
    np.testing.assert_allclose([res["relevance_score"] for res in results], _expected(colbert, query, documents[:10]),
                               atol=TOLERANCE, rtol=0)


def test_max_tokens_per_doc_cuts_each_documents_own_tokens(server, colbert, documents, tmp_path):
    # Five own tokens, [CLS] and [SEP] around them and [D] after [CLS]: PyLate with document_length 8.
    short = Path(shutil.copytree(colbert, tmp_path / "short"))
    cfg_path = short / "config_sentence_transformers.json"
    cfg_path.write_text(json.dumps({**json.loads(cfg_path.read_text()), "document_length": 8}))
    r = _post(server, "/v1/rerank", {"model": COLBERT, "query": QUERY, "documents": documents[:10],
                                     "max_tokens_per_doc": 5})
    assert r.status_code == 200, r.text
    results = sorted(r.json()["results"], key=lambda res: res["index"])
    expected = maxsim(reference_vectors(colbert, [QUERY], True)[0], reference_vectors(short, documents[:10], False))
    np.testing.assert_allclose([res["relevance_score"] for res in results], expected, atol=TOLERANCE, rtol=0)


def test_embeddings_of_the_colbert_model_are_unchanged(server, colbert, documents):
    r = _post(server, "/v1/embeddings", {"model": COLBERT, "input": documents[:5], "input_type": "document"})
    assert r.status_code == 200, r.text
    for item, want in zip(r.json()["data"], reference_vectors(colbert, documents[:5], False), strict=True):
        np.testing.assert_allclose(np.asarray(item["embedding"], dtype=np.float32), want, atol=TOLERANCE, rtol=0)


BAD = [
    # (name, path, body): whatever the cross-encoder's route answers, the ColBERT model's answers alike
    ("no documents", "/v1/rerank", {"query": QUERY, "documents": []}),
    ("documents missing", "/v1/rerank", {"query": QUERY}),
    ("too many documents", "/v1/rerank", {"query": QUERY, "documents": ["a"] * 1001}),
    ("top_n zero", "/v1/rerank", {"query": QUERY, "documents": ["a"], "top_n": 0}),
    ("max_tokens_per_doc zero", "/v2/rerank", {"query": QUERY, "documents": ["a"], "max_tokens_per_doc": 0}),
    ("query missing", "/v1/rerank", {"documents": ["a"]}),
    ("document of a wrong type", "/v1/rerank", {"query": QUERY, "documents": [3]}),
    ("TEI body off /rerank", "/v1/rerank", {"query": QUERY, "texts": ["a"]}),
    ("both documents and texts", "/rerank", {"query": QUERY, "texts": ["a"], "documents": ["a"]}),
    ("left truncation", "/rerank", {"query": QUERY, "texts": ["a"], "truncation_direction": "Left"}),
]


@pytest.mark.parametrize("name,path,body", BAD, ids=[b[0] for b in BAD])
def test_bad_requests_get_what_the_cross_encoder_gets(server, name, path, body):
    theirs = _post(server, path, {**body, "model": CROSS_ENCODER})
    ours = _post(server, path, {**body, "model": COLBERT})
    assert 400 <= theirs.status_code < 500
    error = assert_envelope(ours, theirs.status_code, theirs.json()["error"]["code"])
    assert error["param"] == theirs.json()["error"]["param"]


def test_a_rerank_request_naming_no_model_gets_the_cross_encoder(server):
    r = _post(server, "/v1/rerank", {"query": QUERY, "documents": ["one", "two"]})
    assert r.status_code == 200 and r.json()["model"] == CROSS_ENCODER
