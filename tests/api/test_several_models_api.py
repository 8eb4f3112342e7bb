"""Several models behind one app, in process: a fake embedder and a fake reranker on one engine
(tests/support/fake_engine.py, tests/support/fake_reranker.py). Each route picks its model by the request's
`model`; the default names reach the first model of the route's kind; /v1/models and /health list
both; an unknown name is a 404 that lists every id; /metrics counts each model's requests under its
own `model` label; `--model NAME=PATH` names a model."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from rose_embed.server.cli.main import build_parser, config_from_args
from rose_embed.server.config import ExtraModel, model_configs
from tests.conftest import load_texts
from tests.support.fake_engine import FAKE_MODEL, FakeEngine, fake_config, serve, serve_async
from tests.support.fake_reranker import FAKE_RERANKER, FakeReranker
from tests.support.helpers import assert_envelope, sample

QUERY = "How do I read a file line by line?"


@pytest.fixture(scope="module")
def models() -> tuple[FakeEngine, FakeReranker]:
    return FakeEngine(dim=48, max_seq_len=64), FakeReranker()


@pytest.fixture(scope="module")
def client(models):
    with serve(list(models)) as client:
        yield client


def _vectors(response) -> np.ndarray:
    assert response.status_code == 200, response.text
    return np.array([d["embedding"] for d in response.json()["data"]], dtype=np.float32)


def _scores(response, num_documents: int) -> np.ndarray:
    assert response.status_code == 200, response.text
    by_index = {r["index"]: r["relevance_score"] for r in response.json()["results"]}
    return np.array([by_index[i] for i in range(num_documents)])


@pytest.mark.parametrize("asked", [FAKE_MODEL, None, "text-embedding-3-small"])
def test_embeddings_reach_the_embedder_whether_named_or_not(client, models, asked):
    texts = load_texts(5)
    r = client.post("/v1/embeddings", json={"input": texts, **({"model": asked} if asked else {})})
    np.testing.assert_allclose(_vectors(r), models[0].embed(texts), atol=1e-6)
    assert r.json()["model"] == FAKE_MODEL


@pytest.mark.parametrize("asked", [FAKE_RERANKER, None])
def test_rerank_reaches_the_reranker_whether_named_or_not(client, models, asked):
    documents = load_texts(7)
    r = client.post("/v1/rerank", json={"query": QUERY, "documents": documents, **({"model": asked} if asked else {})})
    np.testing.assert_allclose(_scores(r, 7), models[1].scores_of(QUERY, documents)[:, 0], atol=1e-6)
    assert r.json()["model"] == FAKE_RERANKER


def test_the_wrong_kind_keeps_its_400(client):
    r = client.post("/v1/embeddings", json={"input": "a", "model": FAKE_RERANKER})
    assert_envelope(r, 400, "model_is_reranker")
    r = client.post("/v1/rerank", json={"query": "q", "documents": ["d"], "model": FAKE_MODEL})
    assert_envelope(r, 400, "model_is_embedder")


def test_models_lists_every_id_with_its_kind(client):
    body = client.get("/v1/models").json()
    assert [(m["id"], m["kind"]) for m in body["data"]] == [(FAKE_MODEL, "embedding"), (FAKE_RERANKER, "rerank")]
    assert client.get(f"/v1/models/{FAKE_RERANKER}").json()["kind"] == "rerank"


def test_an_unknown_model_is_a_404_that_lists_the_served_ids(client):
    error = assert_envelope(client.post("/v1/embeddings", json={"input": "a", "model": "nope"}), 404, "model_not_found")
    assert f"'{FAKE_MODEL}'" in error["message"] and f"'{FAKE_RERANKER}'" in error["message"]
    assert "--model-alias nope=MODEL" in error["message"]


def test_tokenize_uses_the_named_model(client):
    limits = [client.post("/tokenize", json={"model": name, "prompt": "hello"}).json()["max_model_len"]
              for name in (FAKE_MODEL, FAKE_RERANKER)]
    assert limits[0] == 64 and limits[1] != 64


def test_health_names_each_model_on_each_engine(client):
    (engine,) = client.get("/health").json()["engines"]
    assert [(m["id"], m["kind"]) for m in engine["models"]] == [(FAKE_MODEL, "embedding"), (FAKE_RERANKER, "rerank")]
    assert all(m["weights_bytes"] == 0 for m in engine["models"])  # fakes hold no weights


def test_metrics_keep_each_models_requests_apart(client):
    """Requests, phases, inputs and tokens under the served id that computed them; a request
    answered before any model was picked under model=""."""
    before = client.get("/metrics").text
    embedded = client.post("/v1/embeddings", json={"input": load_texts(3)})  # no name: the embedder
    reranked = client.post("/v1/rerank", json={"model": FAKE_RERANKER, "query": QUERY, "documents": load_texts(4)})
    assert embedded.status_code == reranked.status_code == 200
    assert client.post("/tokenize", json={"model": FAKE_RERANKER, "prompt": "hello"}).status_code == 200
    assert_envelope(client.post("/v1/embeddings", json={"input": "a", "model": "nope"}), 404, "model_not_found")
    assert_envelope(client.post("/v1/rerank", content=b"{not json", headers={"content-type": "application/json"}), 400)
    wrong_kind = client.post("/v1/embeddings", json={"input": "a", "model": FAKE_RERANKER})
    assert_envelope(wrong_kind, 400, "model_is_reranker")
    text = client.get("/metrics").text

    def grew(name: str) -> float:
        return sample(text, name) - sample(before, name)

    def requests(model: str, route: str, status: int) -> str:
        return f'rose_requests_total{{model="{model}",route="{route}",status="{status}"}}'

    assert grew(requests(FAKE_MODEL, "/v1/embeddings", 200)) == 1
    assert grew(requests(FAKE_RERANKER, "/v1/rerank", 200)) == 1
    assert grew(requests(FAKE_RERANKER, "/tokenize", 200)) == 1
    assert grew(requests("", "/v1/embeddings", 404)) == 1
    assert grew(requests("", "/v1/rerank", 400)) == 1
    assert grew(requests(FAKE_RERANKER, "/v1/embeddings", 400)) == 1  # picked, then refused for its kind
    assert requests(FAKE_MODEL, "/v1/rerank", 200) not in text
    for model in (FAKE_MODEL, FAKE_RERANKER):
        assert grew(f'rose_request_phase_seconds_count{{model="{model}",phase="inference"}}') == 1
    assert grew(f'rose_request_phase_seconds_count{{model="{FAKE_MODEL}",phase="total"}}') == 1
    assert grew(f'rose_request_phase_seconds_count{{model="{FAKE_RERANKER}",phase="total"}}') == 3
    assert grew('rose_request_phase_seconds_count{model="",phase="total"}') == 3  # with the first scrape
    assert 'rose_request_phase_seconds_count{model="",phase="inference"}' not in text
    assert grew(f'rose_request_inputs_total{{model="{FAKE_MODEL}"}}') == 3
    assert grew(f'rose_request_inputs_total{{model="{FAKE_RERANKER}"}}') == 4
    assert grew(f'rose_request_tokens_total{{model="{FAKE_MODEL}"}}') == embedded.json()["usage"]["prompt_tokens"]
    assert grew(f'rose_request_tokens_total{{model="{FAKE_RERANKER}"}}') == reranked.json()["usage"]["total_tokens"]
    assert 'rose_request_tokens_total{model=""}' not in text  # nothing computed, nothing billed


def test_an_alias_may_name_any_model(models):
    config = fake_config(model_aliases=("ranker=" + FAKE_RERANKER, "embedder"))
    with serve(list(models), config) as client:
        ids = [m["id"] for m in client.get("/v1/models").json()["data"]]
        assert ids == [FAKE_MODEL, "embedder", FAKE_RERANKER, "ranker"]
        r = client.post("/v1/rerank", json={"model": "ranker", "query": QUERY, "documents": ["a", "b"]})
        assert r.status_code == 200 and r.json()["model"] == FAKE_RERANKER
        metrics = client.get("/metrics").text  # counted under the served id, not the name asked
        assert sample(metrics, f'rose_requests_total{{model="{FAKE_RERANKER}",route="/v1/rerank",status="200"}}') == 1
        assert 'model="ranker"' not in metrics


def test_requests_to_both_models_interleave(models):
    embedder, reranker = models
    texts, documents = load_texts(40), load_texts(30)

    async def interleaved():
        async with serve_async(list(models)) as client:
            calls = []
            for i in range(12):
                if i % 2:
                    calls.append(client.post("/v1/rerank", json={"model": FAKE_RERANKER, "query": QUERY,
                                                                 "documents": documents[i:]}))
                else:
                    calls.append(client.post("/v1/embeddings", json={"model": FAKE_MODEL, "input": texts[i:]}))
            return await asyncio.gather(*calls)

    answers = asyncio.run(interleaved())
    for i, r in enumerate(answers):
        if i % 2:
            np.testing.assert_allclose(_scores(r, 30 - i), reranker.scores_of(QUERY, documents[i:])[:, 0], atol=1e-6)
        else:
            np.testing.assert_allclose(_vectors(r), embedder.embed(texts[i:]), atol=1e-6)


def test_model_flags_name_the_models():
    args = build_parser().parse_args(["serve", "--model", "embedder=some/dir", "--model", "other/ranker",
                                      "--model", "r2=./x"])
    config = config_from_args(args)
    assert config.served_model_name == "embedder" and config.engine.model == "some/dir"
    assert config.extra_models == (ExtraModel("other/ranker", None), ExtraModel("./x", "r2"))
    assert [c.model for c in model_configs(config)] == ["some/dir", "other/ranker", "./x"]
    both = build_parser().parse_args(["serve", "--model", "a=x", "--served-model-name", "b"])
    with pytest.raises(ValueError, match="--served-model-name"):
        config_from_args(both)
