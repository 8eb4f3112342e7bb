"""Prompt choice per request (server/pipeline/prompts.py), and prompts on the wire."""

from __future__ import annotations

import numpy as np
import pytest

from rose_embed.compat.inputs import InvalidInputError
from rose_embed.compat.tiktoken_ids import load_cl100k
from rose_embed.server.pipeline.prompts import apply_prompt, resolve_prompt
from tests.support.fake_engine import FakeEngine, fake_config, serve
from tests.support.helpers import assert_envelope

QWEN = {"query": "Instruct: find\nQuery:", "document": ""}


@pytest.mark.parametrize("prompt_name,input_type,default,expected", [
    (None, None, None, ""),
    (None, None, "query", QWEN["query"]),
    ("query", None, None, QWEN["query"]),
    (None, "query", None, QWEN["query"]),
    (None, "search_query", None, QWEN["query"]),  # Cohere's name
    (None, "passage", "query", ""),  # NVIDIA's name for documents; overrides the default
    ("query", "query", None, QWEN["query"]),
])
def test_resolve(prompt_name, input_type, default, expected):
    assert resolve_prompt(QWEN, default, prompt_name, input_type) == expected


@pytest.mark.parametrize("prompt_name,input_type,param", [
    ("nope", None, "prompt_name"),
    (None, "clustering", "input_type"),
    ("query", "document", "prompt_name"),
])
def test_unknown_or_conflicting_names_are_400s(prompt_name, input_type, param):
    with pytest.raises(InvalidInputError) as info:
        resolve_prompt(QWEN, None, prompt_name, input_type)
    assert info.value.param == param


def test_models_without_prompts_accept_input_type_only():
    assert resolve_prompt({}, None, None, "query") == ""
    with pytest.raises(InvalidInputError):
        resolve_prompt({}, None, "query", None)


def test_apply_prepends():
    assert apply_prompt("q: ", ["a", "b"]) == ["q: a", "q: b"]
    assert apply_prompt("", ["a"]) == ["a"]


# ---- on the wire (fake engine, in process) -------------------------------------------------------------


@pytest.fixture(scope="module")
def fake() -> FakeEngine:
    return FakeEngine(prompts=QWEN)


@pytest.fixture(scope="module")
def defaulted() -> FakeEngine:
    """A model whose default prompt is `query` (as --default-prompt-name query would make it)."""
    return FakeEngine(prompts=QWEN, default_prompt_name="query")


@pytest.fixture(scope="module")
def client_with_default(defaulted):
    with serve(defaulted) as client:
        yield client


TEXTS = ["what is a packed batch?", "  spaces around  "]


def _answer(client, **body) -> tuple[np.ndarray, int]:
    r = client.post("/v1/embeddings", json={"input": TEXTS, "encoding_format": "float", **body})
    assert r.status_code == 200, r.text
    return np.array([d["embedding"] for d in r.json()["data"]], np.float32), r.json()["usage"]["prompt_tokens"]


@pytest.mark.parametrize("body,prompt", [
    ({}, ""),
    ({"prompt_name": "query"}, QWEN["query"]),
    ({"input_type": "query"}, QWEN["query"]),
    ({"input_type": "search_query"}, QWEN["query"]),
    ({"input_type": "search_document"}, QWEN["document"]),
    ({"prompt_name": "document"}, ""),
])
def test_prompt_is_prepended_before_tokenizing(client, fake, body, prompt):
    vectors, tokens = _answer(client, **body)
    prompted = apply_prompt(prompt, TEXTS)
    np.testing.assert_allclose(vectors, fake.embed(prompted), atol=1e-6, rtol=0)
    assert tokens == sum(map(len, fake.tokenize(prompted)))  # the prompt's tokens count in usage
    if prompt:
        assert not np.allclose(vectors, fake.embed(TEXTS), atol=1e-3)


def test_the_models_default_prompt_applies_unless_the_request_names_another(client_with_default, defaulted):
    np.testing.assert_allclose(_answer(client_with_default)[0], defaulted.embed(apply_prompt(QWEN["query"], TEXTS)),
                               atol=1e-6, rtol=0)
    np.testing.assert_allclose(_answer(client_with_default, input_type="passage")[0], defaulted.embed(TEXTS),
                               atol=1e-6, rtol=0)


def test_cl100k_ids_are_text_and_get_the_prompt(client, fake):
    """Token ids are cl100k_base's by default: decoded to text, which is prompted like any text."""
    ids = load_cl100k().encode_ordinary(TEXTS[0])
    r = client.post("/v1/embeddings", json={"input": [ids], "prompt_name": "query", "encoding_format": "float"})
    np.testing.assert_allclose(r.json()["data"][0]["embedding"], fake.embed([QWEN["query"] + TEXTS[0]])[0],
                               atol=1e-6, rtol=0)


def test_model_token_ids_get_no_prompt(fake):
    ids = fake.tokenize(TEXTS[:1])[0].tolist()
    with serve(fake, fake_config(token_ids="model")) as client:
        r = client.post("/v1/embeddings", json={"input": [ids], "prompt_name": "query", "encoding_format": "float"})
    np.testing.assert_allclose(r.json()["data"][0]["embedding"], fake.vectors_of([np.array(ids)])[0],
                               atol=1e-6, rtol=0)


@pytest.mark.parametrize("body,param", [
    ({"prompt_name": "nope"}, "prompt_name"),
    ({"input_type": "clustering"}, "input_type"),
    ({"prompt_name": "query", "input_type": "document"}, "prompt_name"),
])
def test_unknown_or_conflicting_names_are_enveloped_400s(client, body, param):
    error = assert_envelope(client.post("/v1/embeddings", json={"input": "x", **body}), 400)
    assert error["param"] == param and error["type"] == "invalid_request_error"


def test_a_model_without_prompts_accepts_input_type_and_refuses_prompt_name():
    fake = FakeEngine()
    with serve(fake) as client:
        r = client.post("/v1/embeddings", json={"input": "x", "input_type": "query", "encoding_format": "float"})
        np.testing.assert_allclose(r.json()["data"][0]["embedding"], fake.embed(["x"])[0], atol=1e-6, rtol=0)
        assert_envelope(client.post("/v1/embeddings", json={"input": "x", "prompt_name": "query"}), 400)
