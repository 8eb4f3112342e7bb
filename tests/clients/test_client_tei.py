"""Clients of Hugging Face TEI against the real server: huggingface_hub's InferenceClient (which
LangChain's and LlamaIndex's Hugging Face endpoint classes call) posts TEI's body to the URL itself,
POST /; LlamaIndex's TextEmbeddingsInference posts it to /embed. Every vector is compared with
sentence-transformers on the same weights."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from tests.support.client_support import MODEL, assert_close_to_st
from tests.conftest import load_texts

pytestmark = pytest.mark.slow  # the real model in a real server process


@pytest.fixture
def hub_online(monkeypatch):
    """The suite sets HF_HUB_OFFLINE, under which huggingface_hub refuses every request, a local URL's too."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return load_texts(300)


def test_inference_client_feature_extraction(server, st_reference, hub_online, texts):
    """`truncate=True` as TEI asks: some of the texts are past the model's 256 tokens."""
    from huggingface_hub import InferenceClient

    client = InferenceClient(model=server.url)
    vectors = client.feature_extraction(texts, truncate=True)
    assert vectors.shape == (len(texts), 384)
    assert_close_to_st(vectors, st_reference.encode(texts, normalize_embeddings=True))
    query = "How do I read a file line by line?"
    (one,) = client.feature_extraction(query)
    assert_close_to_st([one], st_reference.encode([query], normalize_embeddings=True))


def test_inference_client_options(server, st_reference, hub_online, texts):
    from huggingface_hub import InferenceClient

    client = InferenceClient(model=server.url)
    vectors = client.feature_extraction(texts[:20], normalize=False, truncation_direction="right", truncate=True,
                                        dimensions=128)
    cut = st_reference.encode(texts[:20], normalize_embeddings=False)[:, :128]  # cut, not re-normalised
    assert_close_to_st(vectors, cut)


def test_inference_client_too_long_input_without_truncate(server, hub_online):
    from huggingface_hub import InferenceClient
    from huggingface_hub.errors import HfHubHTTPError

    long_text = "\n\n".join(load_texts(40))
    with pytest.raises(HfHubHTTPError) as caught:
        InferenceClient(model=server.url).feature_extraction(long_text)
    assert caught.value.response.status_code == 400
    assert json.loads(caught.value.response.text)["error"]["code"] == "context_length_exceeded"


def test_async_inference_client(server, st_reference, hub_online, texts):
    from huggingface_hub import AsyncInferenceClient

    vectors = asyncio.run(AsyncInferenceClient(model=server.url).feature_extraction(texts[:50], truncate=True))
    assert_close_to_st(vectors, st_reference.encode(texts[:50], normalize_embeddings=True))


def test_llamaindex_text_embeddings_inference(server, st_reference, texts):
    """Batches of 10 texts to /embed with `truncate: true`."""
    tei = pytest.importorskip("llama_index.embeddings.text_embeddings_inference")
    bodies: list[dict] = []
    real_post = httpx.Client.post

    def recording_post(self, url, **kwargs):
        bodies.append({"url": str(url), **kwargs["json"]})
        return real_post(self, url, **kwargs)

    embed_model = tei.TextEmbeddingsInference(base_url=server.url, model_name=MODEL)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(httpx.Client, "post", recording_post)
        vectors = embed_model.get_text_embedding_batch(texts)
    assert {body["url"] for body in bodies} == {server.url + "/embed"}
    assert [len(body["inputs"]) for body in bodies] == [10] * 30 and all(body["truncate"] for body in bodies)
    assert_close_to_st(vectors, st_reference.encode(texts, normalize_embeddings=True))
    query = "How do I read a file line by line?"
    assert_close_to_st([embed_model.get_query_embedding(query)], st_reference.encode([query],
                                                                                      normalize_embeddings=True))
    many = asyncio.run(embed_model.aget_text_embedding_batch(texts[:40]))
    assert_close_to_st(many, st_reference.encode(texts[:40], normalize_embeddings=True))
