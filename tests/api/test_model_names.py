"""Which `model` names the server answers (server/pipeline/aliases.py), on the fake engine in process.

By default OpenAI's and Cohere's embedding names reach the one served model, so clients that
hard-code them work unchanged; `--strict-model-names` turns that off. Whichever name was asked, the answer's
`model` is the served model's.
"""

from __future__ import annotations

import numpy as np
import pytest

from rose_embed.server.cli.main import build_parser, config_from_args
from rose_embed.server.pipeline.aliases import COHERE_EMBEDDING_NAMES, OPENAI_EMBEDDING_NAMES, model_names
from rose_embed.server.http.errors import APIError
from tests.support.fake_engine import FAKE_MODEL, fake_config, serve


@pytest.fixture(scope="module")
def strict(fake):
    """--strict-model-names with one of OpenAI's names given back by --model-alias."""
    with serve(fake, fake_config(strict_model_names=True, model_aliases=("text-embedding-3-small",))) as client:
        yield client


def _vectors(response) -> np.ndarray:
    assert response.status_code == 200, response.text
    return np.array([d["embedding"] for d in response.json()["data"]], dtype=np.float32)


@pytest.mark.parametrize("name", OPENAI_EMBEDDING_NAMES)
def test_openai_names_reach_the_served_model_and_the_answer_names_it(client, fake, name):
    r = client.post("/v1/embeddings", json={"model": name, "input": ["hi", "there"], "encoding_format": "float"})
    np.testing.assert_allclose(_vectors(r), fake.embed(["hi", "there"]), atol=1e-6, rtol=0)
    assert r.json()["model"] == FAKE_MODEL
    assert client.get(f"/v1/models/{name}").json()["id"] == name  # a name a request may use is described


@pytest.mark.parametrize("name", OPENAI_EMBEDDING_NAMES)
def test_contextualized_route_answers_the_same_names(client, name):
    r = client.post("/v1/contextualizedembeddings", json={"model": name, "input": [["a chunk", "another"]]})
    assert r.status_code == 200, r.text
    assert r.json()["model"] == FAKE_MODEL


@pytest.mark.parametrize("name", COHERE_EMBEDDING_NAMES)
def test_cohere_names_reach_the_served_model(client, fake, name):
    """LlamaIndex's CohereEmbedding takes only Cohere's names: each is answered, on every embedding route."""
    r = client.post("/v2/embed", json={"model": name, "texts": ["hi", "there"], "input_type": "search_document"})
    assert r.status_code == 200, r.text
    np.testing.assert_allclose(r.json()["embeddings"]["float"], fake.embed(["hi", "there"]), atol=1e-6, rtol=0)
    assert client.post("/v1/embeddings", json={"model": name, "input": "hi"}).json()["model"] == FAKE_MODEL


def test_strict_server_refuses_cohere_names(strict):
    r = strict.post("/v2/embed", json={"model": "embed-english-v3.0", "texts": ["hi"]})
    assert r.status_code == 404, r.text
    assert r.json()["error"]["code"] == "model_not_found"


def test_models_list_leaves_the_implicit_names_out(client):
    assert [m["id"] for m in client.get("/v1/models").json()["data"]] == [FAKE_MODEL]


def test_request_without_model_is_answered_with_the_served_name(client):
    r = client.post("/v1/embeddings", json={"input": "hi"})
    assert r.status_code == 200 and r.json()["model"] == FAKE_MODEL


@pytest.mark.parametrize("name", ["text-embedding-ada-002", "text-embedding-3-large"])
@pytest.mark.parametrize("path", ["/v1/embeddings", "/v1/contextualizedembeddings"])
def test_strict_server_refuses_openai_names_it_was_not_given(strict, name, path):
    r = strict.post(path, json={"model": name, "input": [["hi"]] if "contextualized" in path else "hi"})
    assert r.status_code == 404, r.text
    error = r.json()["error"]
    assert (error["param"], error["code"]) == ("model", "model_not_found")
    assert f"serves '{FAKE_MODEL}' (also as 'text-embedding-3-small')" in error["message"]
    assert f"--model-alias {name}" in error["message"]
    assert strict.get(f"/v1/models/{name}").status_code == 404


def test_strict_server_answers_an_aliased_openai_name_with_the_served_name(strict, fake):
    r = strict.post("/v1/embeddings", json={"model": "text-embedding-3-small", "input": "hi",
                                            "encoding_format": "float"})
    np.testing.assert_allclose(_vectors(r), fake.embed(["hi"]), atol=1e-6, rtol=0)
    assert r.json()["model"] == FAKE_MODEL
    assert [m["id"] for m in strict.get("/v1/models").json()["data"]] == [FAKE_MODEL, "text-embedding-3-small"]


def test_cli_flag_sets_strict_names():
    parse = build_parser().parse_args
    assert config_from_args(parse(["serve", "--strict-model-names"])).strict_model_names is True
    assert config_from_args(parse(["serve"])).strict_model_names is False


def test_resolve_and_listed():
    names = model_names("served", ("mine", "served", "text-embedding-3-small=served"))
    assert names.listed() == ["served", "mine", "text-embedding-3-small"]
    assert {names.resolve(n) for n in (None, "served", "mine", *OPENAI_EMBEDDING_NAMES, *COHERE_EMBEDDING_NAMES)
            } == {"served"}
    with pytest.raises(APIError) as info:
        names.resolve("unknown")
    assert (info.value.status, info.value.code) == (404, "model_not_found")
    strict = model_names("served", ("mine",), is_strict=True)
    assert strict.resolve("mine") == "served"
    for name in OPENAI_EMBEDDING_NAMES + COHERE_EMBEDDING_NAMES:
        with pytest.raises(APIError):
            strict.resolve(name)
