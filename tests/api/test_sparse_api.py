"""Sparse embeddings on a fake sparse encoder, in process: POST /embed_sparse in TEI's shape and
/v1/embeddings in this server's extension, each text's pairs equal to the fake's one-text-at-a-time
reference (tests/support/fake_sparse.py) across parts, prompts and truncation; every bad request in
OpenAI's envelope with a 4xx, a text past its row included; a sparse encoder beside a dense
embedder and a reranker, each route reaching the model of its kind and refusing the others by name."""

from __future__ import annotations

import numpy as np
import pytest

from rose_embed.engine.contract.config import EngineConfig
from rose_embed.engine.model_files.sparse import MAX_UNCUT_DIMS
from tests.conftest import load_texts
from tests.support.fake_engine import FAKE_MODEL, FakeEngine, fake_config, serve
from tests.support.fake_reranker import FAKE_RERANKER, FakeReranker
from tests.support.fake_sparse import FAKE_SPARSE, FakeSparse
from tests.support.helpers import assert_envelope

PROMPTS = {"query": "query: ", "document": ""}
# Few sequences a batch: the arena's rows are as wide as the sparse model's (1 + 2 x 2048 floats).
ENGINE = EngineConfig(device="cpu", max_batch_tokens=4096, max_batch_seqs=64)


@pytest.fixture(scope="module")
def fake() -> FakeSparse:
    return FakeSparse(prompts=PROMPTS)


@pytest.fixture(scope="module")
def client(fake):
    with serve(fake, fake_config(engine=ENGINE)) as client:
        yield client


# A text whose tokens light more dimensions than a row holds (test_a_text_past_its_row_is_refused_not_cut).
LONG_TEXT = " ".join(load_texts(60))


def _assert_pairs(got: list[tuple[list[int], list[float]]], expected) -> None:
    assert len(got) == len(expected)
    for (indices, values), (want_indices, want_values) in zip(got, expected):
        assert indices == want_indices.tolist()
        np.testing.assert_allclose(values, want_values, rtol=1e-6)


def _tei(response) -> list[tuple[list[int], list[float]]]:
    assert response.status_code == 200, response.text
    return [([p["index"] for p in pairs], [p["value"] for p in pairs]) for pairs in response.json()]


def _openai(response) -> list[tuple[list[int], list[float]]]:
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    assert [d["index"] for d in data] == list(range(len(data)))
    assert {d["object"] for d in data} == {"sparse_embedding"}
    return [(d["embedding"]["indices"], d["embedding"]["values"]) for d in data]


def test_embed_sparse_answers_teis_shape(client, fake):
    texts = load_texts(5)
    _assert_pairs(_tei(client.post("/embed_sparse", json={"inputs": texts})), fake.pairs_of(texts))
    _assert_pairs(_tei(client.post("/embed_sparse", json={"inputs": texts[0]})), fake.pairs_of(texts[:1]))


def test_many_texts_cross_parts_and_keep_their_order(client, fake):
    texts = [text for text in load_texts(300) if len(text) < 400][:150]
    _assert_pairs(_tei(client.post("/embed_sparse", json={"inputs": texts})), fake.pairs_of(texts))


def test_return_text_names_each_pairs_token(client, fake):
    text = "Sparse retrieval expands terms"
    r = client.post("/embed_sparse", json={"inputs": [text], "return_text": True})
    pairs = r.json()[0]
    assert [p["text"] for p in pairs] == fake.tokenizer.token_strings([p["index"] for p in pairs])
    assert {"sparse", "retrieval", "expands", "terms"} <= {p["text"] for p in pairs}  # each token lights itself
    assert all("text" not in p for p in client.post("/embed_sparse", json={"inputs": [text]}).json()[0])


def test_v1_embeddings_answers_the_extension(client, fake):
    texts = load_texts(7)
    r = client.post("/v1/embeddings", json={"input": texts, "model": FAKE_SPARSE})
    _assert_pairs(_openai(r), fake.pairs_of(texts))
    assert r.json()["model"] == FAKE_SPARSE
    assert r.json()["usage"]["prompt_tokens"] == sum(len(s) for s in fake.tokenize(texts))
    with_tokens = client.post("/v1/embeddings", json={"input": texts[:2], "return_text": True}).json()["data"]
    for item in with_tokens:
        assert item["embedding"]["tokens"] == fake.tokenizer.token_strings(item["embedding"]["indices"])


def test_prompts_and_truncation(client, fake):
    texts = load_texts(3)
    asked = client.post("/embed_sparse", json={"inputs": texts, "prompt_name": "query"})
    _assert_pairs(_tei(asked), fake.pairs_of(["query: " + t for t in texts]))
    by_type = client.post("/v1/embeddings", json={"input": texts, "input_type": "query"})
    _assert_pairs(_openai(by_type), fake.pairs_of(["query: " + t for t in texts]))
    long_text = " ".join(texts) * 12  # over the limit, in fewer words than light a row
    cut = client.post("/embed_sparse", json={"inputs": [long_text], "truncate": True})
    assert len(fake.tokenize([long_text])[0]) == fake.spec.max_seq_len
    _assert_pairs(_tei(cut), fake.pairs_of([long_text]))


def test_a_text_past_its_row_is_refused_not_cut(client, fake):
    long_text = LONG_TEXT
    assert len(fake.pairs_of([long_text])[0][0]) > MAX_UNCUT_DIMS
    for path, body, param in (("/embed_sparse", {"inputs": ["short", long_text], "truncate": True}, "inputs"),
                              ("/v1/embeddings", {"input": ["short", long_text]}, "input")):
        error = assert_envelope(client.post(path, json=body), 400, "too_many_active_dims")
        assert error["param"] == param and f"{param}[1]" in error["message"] and "--max-active-dims" in error["message"]


def test_a_top_k_model_keeps_each_texts_largest():
    fake = FakeSparse(max_active_dims=6)
    with serve(fake, fake_config(engine=ENGINE)) as client:
        texts = [*load_texts(4), LONG_TEXT]
        got = _tei(client.post("/embed_sparse", json={"inputs": texts, "truncate": True}))
    assert {len(indices) for indices, _ in got} == {6}
    _assert_pairs(got, fake.pairs_of(texts))


BAD = [
    # (name, path, body, status, param, code)
    ("no inputs", "/embed_sparse", {"inputs": []}, 400, "inputs", None),
    ("inputs missing", "/embed_sparse", {}, 400, "inputs", None),
    ("token ids to TEI's route", "/embed_sparse", {"inputs": [1, 2]}, 400, "inputs", None),
    ("return_text not a bool", "/embed_sparse", {"inputs": "a", "return_text": "yes"}, 400, "return_text", None),
    ("left truncation", "/embed_sparse", {"inputs": "a", "truncation_direction": "Left"}, 400,
     "truncation_direction", None),
    ("over the limit without truncate", "/embed_sparse", {"inputs": ["a", " ".join(load_texts(12))]}, 400, "inputs",
     "context_length_exceeded"),
    ("unknown prompt", "/embed_sparse", {"inputs": "a", "prompt_name": "instruction"}, 400, "prompt_name", None),
    ("unknown model", "/embed_sparse", {"inputs": "a", "model": "naver/splade-v3"}, 404, "model", "model_not_found"),
    ("dimensions", "/v1/embeddings", {"input": "a", "dimensions": 8}, 400, "dimensions", None),
    ("int8", "/v1/embeddings", {"input": "a", "encoding_format": "int8"}, 400, "encoding_format", None),
    ("long inputs in windows", "/v1/embeddings", {"input": "a", "long_inputs": "chunk"}, 400, "long_inputs", None),
    ("a sparse model asked for dense vectors", "/embed", {"inputs": "a"}, 400, "model", "model_is_sparse"),
    ("a sparse model asked by Cohere's wire", "/v2/embed", {"texts": ["a"], "input_type": "search_query"}, 400,
     "model", "model_is_sparse"),
    ("a sparse model asked to late-chunk", "/v1/contextualizedembeddings", {"inputs": [["a", "b"]]}, 400, "model",
     "model_is_sparse"),
    ("a sparse model asked to rerank", "/v1/rerank", {"query": "q", "documents": ["a"]}, 400, "model",
     "model_is_sparse"),
]


@pytest.mark.parametrize("name,path,body,status,param,code", BAD, ids=[b[0] for b in BAD])
def test_bad_requests_get_the_envelope(client, name, path, body, status, param, code):
    error = assert_envelope(client.post(path, json=body), status, code)
    assert error["param"] == param
    # The request harmed nothing: the next one is answered as ever.
    assert len(_tei(client.post("/embed_sparse", json={"inputs": ["one", "two"]}))) == 2


def test_a_body_that_is_not_json(client):
    r = client.post("/embed_sparse", content=b"{inputs", headers={"content-type": "application/json"})
    assert_envelope(r, 400)


@pytest.fixture(scope="module")
def several():
    models = FakeEngine(dim=32), FakeSparse(), FakeReranker()
    with serve(list(models), fake_config(engine=ENGINE)) as client:
        yield client, models


def test_each_route_reaches_the_model_of_its_kind(several):
    client, (dense, sparse, _) = several
    texts = load_texts(4)
    r = client.post("/v1/embeddings", json={"input": texts})
    assert r.json()["model"] == FAKE_MODEL and r.json()["data"][0]["object"] == "embedding"
    np.testing.assert_allclose([d["embedding"] for d in r.json()["data"]], dense.embed(texts), atol=1e-6)
    _assert_pairs(_openai(client.post("/v1/embeddings", json={"input": texts, "model": FAKE_SPARSE})),
                  sparse.pairs_of(texts))
    _assert_pairs(_tei(client.post("/embed_sparse", json={"inputs": texts})), sparse.pairs_of(texts))
    kinds = {m["id"]: m["kind"] for m in client.get("/v1/models").json()["data"]}
    assert kinds == {FAKE_MODEL: "embedding", FAKE_SPARSE: "sparse_embedding", FAKE_RERANKER: "rerank"}


@pytest.mark.parametrize("path,body,code,named", [
    ("/embed_sparse", {"inputs": "a", "model": FAKE_MODEL}, "model_is_embedder", "SPLADE"),
    ("/embed_sparse", {"inputs": "a", "model": FAKE_RERANKER}, "model_is_reranker", "/v1/rerank"),
    ("/embed", {"inputs": "a", "model": FAKE_SPARSE}, "model_is_sparse", "/embed_sparse"),
    ("/v1/embeddings", {"input": "a", "return_text": True}, None, "sparse models"),
])
def test_a_model_of_another_kind_is_refused_by_name(several, path, body, code, named):
    client, _ = several
    error = assert_envelope(client.post(path, json=body), 400, code)
    assert named in error["message"]
