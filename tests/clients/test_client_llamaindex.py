"""LlamaIndex: OpenAIEmbedding(model_name=...) and OpenAILikeEmbedding, batches of 10 to 100."""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest
from llama_index.embeddings import openai as openai_embedding
from llama_index.embeddings import openai_like
from tests.support.client_support import (
    ALIAS,
    MODEL,
    assert_same_vectors,
    reference_vectors,
)
from tests.conftest import load_texts

pytestmark = pytest.mark.slow  # LlamaIndex against a real server process


def counting_client() -> tuple[httpx.Client, list[int]]:
    """An httpx client that records how many inputs each request carried."""
    sizes: list[int] = []

    def on_request(request: httpx.Request) -> None:
        sizes.append(len(json.loads(request.content)["input"]))

    return httpx.Client(event_hooks={"request": [on_request]}), sizes


@pytest.mark.parametrize("name", [ALIAS, MODEL])
def test_openai_embedding_model_name(docs_server, name):
    """Both an OpenAI name (an alias here) and the served name are accepted."""
    texts = load_texts(30)
    embed_model = openai_embedding.OpenAIEmbedding(model_name=name, api_base=docs_server.url + "/v1",
                                                   api_key="unused")
    assert_same_vectors(embed_model.get_text_embedding_batch(texts), reference_vectors(docs_server.url, texts))
    query = "sort a list in place"
    assert_same_vectors([embed_model.get_query_embedding(query)], reference_vectors(docs_server.url, [query]))


def test_openai_embedding_with_no_model_named(server):
    """`OpenAIEmbedding(api_base=..., api_key=...)` asks for OpenAI's default name, answered by the served model."""
    texts = load_texts(30)
    http, _ = counting_client()
    models: list[str] = []
    http.event_hooks["request"].append(lambda request: models.append(json.loads(request.content)["model"]))
    embed_model = openai_embedding.OpenAIEmbedding(api_base=server.url + "/v1", api_key="unused", http_client=http)
    assert_same_vectors(embed_model.get_text_embedding_batch(texts), reference_vectors(server.url, texts))
    query = "sort a list in place"
    assert_same_vectors([embed_model.get_query_embedding(query)], reference_vectors(server.url, [query]))
    assert set(models) == {"text-embedding-ada-002"}


def test_openai_embedding_with_no_model_named_against_a_strict_server(strict_server):
    embed_model = openai_embedding.OpenAIEmbedding(api_base=strict_server.url + "/v1", api_key="unused",
                                                   max_retries=0)
    with pytest.raises(openai.NotFoundError) as info:
        embed_model.get_query_embedding("hi")
    assert info.value.code == "model_not_found"


def test_openai_embedding_default_batch_of_100(docs_server):
    texts = load_texts(150)
    http, sizes = counting_client()
    embed_model = openai_embedding.OpenAIEmbedding(model_name=ALIAS, api_base=docs_server.url + "/v1",
                                                   api_key="unused", http_client=http)
    vectors = embed_model.get_text_embedding_batch(texts)
    assert sizes == [100, 50]  # LlamaIndex's default embed_batch_size
    assert_same_vectors(vectors, reference_vectors(docs_server.url, texts))


@pytest.mark.parametrize("batch_size", [10, 100])
def test_openai_like_embedding(docs_server, batch_size):
    texts = load_texts(100)
    http, sizes = counting_client()
    embed_model = openai_like.OpenAILikeEmbedding(model_name=MODEL, api_base=docs_server.url + "/v1",
                                                  embed_batch_size=batch_size, http_client=http)
    vectors = embed_model.get_text_embedding_batch(texts)
    assert sizes == [batch_size] * (100 // batch_size)
    assert_same_vectors(vectors, reference_vectors(docs_server.url, texts))


def test_openai_like_embedding_async(docs_server):
    texts = load_texts(40)
    embed_model = openai_like.OpenAILikeEmbedding(model_name=MODEL, api_base=docs_server.url + "/v1")
    vectors = asyncio.run(embed_model.aget_text_embedding_batch(texts))
    assert_same_vectors(vectors, reference_vectors(docs_server.url, texts))
