"""Cohere's Python SDK (ClientV2.embed and the v1 Client.embed) and TEI's /embed body through httpx
against the real server on the default model, every vector compared with sentence-transformers
on the same weights; bad requests are 4xx that the SDK raises as its typed errors."""

from __future__ import annotations

import base64

import httpx
import numpy as np
import pytest

from tests.support.client_support import MODEL, assert_close_to_st as assert_close
from tests.conftest import load_texts
from tests.support.helpers import assert_envelope

pytestmark = pytest.mark.slow  # the real model in a real server process


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return load_texts(6)


@pytest.fixture(scope="module")
def cohere_v2(server):
    import cohere

    return cohere.ClientV2(base_url=server.url, api_key="unused")


@pytest.mark.parametrize("input_type", ["search_document", "search_query", "clustering"])
def test_v2_float_and_base64(cohere_v2, st_reference, texts, input_type):
    """all-MiniLM-L6-v2 has no prompts: every input type embeds the text as it is."""
    response = cohere_v2.embed(model=MODEL, texts=texts, input_type=input_type, embedding_types=["float", "base64"])
    expected = st_reference.encode(texts, normalize_embeddings=True)
    assert_close(response.embeddings.float_, expected)
    assert_close([np.frombuffer(base64.b64decode(s), "<f4") for s in response.embeddings.base64], expected)
    assert response.texts == texts and response.response_type == "embeddings_by_type"
    num_tokens = sum(len(ids) for ids in st_reference.tokenizer(texts, truncation=True, max_length=256)["input_ids"])
    assert response.meta.billed_units.input_tokens == num_tokens


def test_v2_output_dimension(cohere_v2, st_reference, texts):
    response = cohere_v2.embed(model=MODEL, texts=texts, input_type="search_query", output_dimension=128,
                               embedding_types=["float"])
    cut = st_reference.encode(texts, normalize_embeddings=True)[:, :128]
    assert_close(response.embeddings.float_, cut / np.linalg.norm(cut, axis=1, keepdims=True))


def test_v1_client_embed(server, st_reference, texts):
    import cohere

    response = cohere.Client(base_url=server.url, api_key="unused").embed(texts=texts, model=MODEL,
                                                                         input_type="search_document")
    assert response.response_type == "embeddings_floats"
    assert_close(response.embeddings, st_reference.encode(texts, normalize_embeddings=True))


@pytest.mark.parametrize("kwargs,param", [
    ({"embedding_types": ["int8"]}, "embedding_types"),  # the default model defines no quantisation
    ({"embedding_types": ["ubinary"]}, "embedding_types"),
    ({"truncate": "START"}, "truncate"),
    ({"images": ["data:image/png;base64,iVBORw0KGgo="]}, "images"),
    ({"input_type": "image"}, "input_type"),
    ({"output_dimension": 1000}, "output_dimension"),
])
def test_v2_bad_requests_raise_the_sdks_typed_error(cohere_v2, kwargs, param):
    import cohere

    body = {"model": MODEL, "input_type": "search_document", "texts": ["a text"], **kwargs}
    with pytest.raises(cohere.errors.BadRequestError) as caught:
        cohere_v2.embed(**body)
    assert caught.value.status_code == 400 and caught.value.body["error"]["param"] == param


def test_v2_unknown_model_is_the_sdks_not_found(cohere_v2):
    import cohere

    with pytest.raises(cohere.errors.NotFoundError):
        cohere_v2.embed(model="no-such-model", texts=["a"], input_type="search_query")


def test_tei_embed_normalize_true_and_false(server, st_reference, texts):
    """The model's modules end in Normalize: sentence-transformers gives unit vectors either way."""
    for normalize in (True, False):
        r = httpx.post(server.url + "/embed", json={"inputs": texts, "normalize": normalize}, timeout=60)
        assert r.status_code == 200, r.text
        assert isinstance(r.json(), list) and len(r.json()) == len(texts)
        assert_close(r.json(), st_reference.encode(texts, normalize_embeddings=normalize))
    one = httpx.post(server.url + "/embed", json={"inputs": texts[0]}, timeout=60).json()
    assert_close(one, st_reference.encode(texts[:1], normalize_embeddings=True))


def test_tei_too_long_input(server, st_reference, texts):
    long_text = "\n\n".join(load_texts(40))
    assert len(st_reference.tokenizer([long_text])["input_ids"][0]) > st_reference.max_seq_length  # past the limit
    refused = httpx.post(server.url + "/embed", json={"inputs": [texts[0], long_text]}, timeout=60)
    error = assert_envelope(refused, 400, "context_length_exceeded")
    assert error["param"] == "inputs"
    cut = httpx.post(server.url + "/embed", json={"inputs": [texts[0], long_text], "truncate": True}, timeout=60)
    assert_close(cut.json(), st_reference.encode([texts[0], long_text], normalize_embeddings=True))
    assert_envelope(httpx.post(server.url + "/embed", json={"inputs": "a", "truncation_direction": "Left"}), 400)
