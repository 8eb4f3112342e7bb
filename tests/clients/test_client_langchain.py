"""LangChain's OpenAIEmbeddings (langchain-openai): tiktoken cl100k_base token ids by default, text on request.

The server reads token ids as cl100k_base ids unless started with --token-ids model, so
LangChain's defaults need no flag.
"""

from __future__ import annotations

import asyncio

import langchain_openai
import numpy as np
import openai
import pytest
from tests.support.client_support import (
    ALIAS,
    MODEL,
    assert_same_vectors,
    reference_vectors,
)
from tests.conftest import load_texts

pytestmark = pytest.mark.slow  # LangChain against real server processes


def sent_bodies(embeddings) -> list[dict]:
    """Wrap the SDK client LangChain built, to see what it sends."""
    bodies: list[dict] = []
    create = embeddings.client.create

    def recording_create(**kwargs):
        bodies.append(kwargs)
        return create(**kwargs)

    embeddings.client.create = recording_create
    return bodies


def test_default_config_sends_tiktoken_ids(docs_server, tiktoken_offline):
    """LangChain's default path: cl100k ids on the wire, read back as text by the server's defaults."""
    texts = load_texts(100)
    embeddings = langchain_openai.OpenAIEmbeddings(model=ALIAS, base_url=docs_server.url + "/v1", api_key="unused")
    bodies = sent_bodies(embeddings)
    vectors = embeddings.embed_documents(texts)
    assert len(bodies) == 1
    assert all(isinstance(ids, list) and all(isinstance(t, int) for t in ids) for ids in bodies[0]["input"])
    assert max(max(ids) for ids in bodies[0]["input"]) >= 30522  # cl100k ids, beyond MiniLM's vocabulary
    expected = reference_vectors(docs_server.url, texts)
    assert_same_vectors(vectors, expected)


def test_no_model_named_against_a_server_started_with_no_flags(server, tiktoken_offline):
    """`OpenAIEmbeddings(base_url=..., api_key=...)`: LangChain asks for text-embedding-ada-002, which the
    server answers with the model it serves. `tiktoken_offline` only stands in for the network: LangChain
    fetches tiktoken's cl100k_base file once to count tokens (or pass check_embedding_ctx_length=False)."""
    embeddings = langchain_openai.OpenAIEmbeddings(base_url=server.url + "/v1", api_key="unused")
    bodies = sent_bodies(embeddings)
    texts = load_texts(20)
    vectors = embeddings.embed_documents(texts)
    assert bodies[0]["model"] == "text-embedding-ada-002"
    assert_same_vectors(vectors, reference_vectors(server.url, texts))
    query = "How do I read a file line by line?"
    assert_same_vectors([embeddings.embed_query(query)], reference_vectors(server.url, [query]))


def test_no_model_named_and_no_tiktoken(server):
    """check_embedding_ctx_length=False sends text and needs no tiktoken file: nothing else to name."""
    embeddings = langchain_openai.OpenAIEmbeddings(base_url=server.url + "/v1", api_key="unused",
                                                   check_embedding_ctx_length=False)
    texts = load_texts(20)
    assert_same_vectors(embeddings.embed_documents(texts), reference_vectors(server.url, texts))


def test_no_model_named_against_a_strict_server_is_a_404(strict_server):
    embeddings = langchain_openai.OpenAIEmbeddings(base_url=strict_server.url + "/v1", api_key="unused",
                                                   check_embedding_ctx_length=False, max_retries=0)
    with pytest.raises(openai.NotFoundError) as info:
        embeddings.embed_query("hi")
    assert info.value.code == "model_not_found"
    assert "text-embedding-ada-002" in info.value.message and MODEL in info.value.message


def test_default_config_query_and_async(server, tiktoken_offline):
    """Against a server started with no flag at all that concerns token ids or names."""
    embeddings = langchain_openai.OpenAIEmbeddings(model=MODEL, base_url=server.url + "/v1", api_key="unused")
    query = "How do I read a file line by line?"
    assert_same_vectors([embeddings.embed_query(query)], reference_vectors(server.url, [query]))
    texts = load_texts(10)
    assert_same_vectors(asyncio.run(embeddings.aembed_documents(texts)), reference_vectors(server.url, texts))


def test_default_config_embeds_empty_text(docs_server, tiktoken_offline):
    """An empty document has no tokens; LangChain then sends "" as a string."""
    embeddings = langchain_openai.OpenAIEmbeddings(model=MODEL, base_url=docs_server.url + "/v1", api_key="unused")
    vectors = embeddings.embed_documents(["", "not empty"])
    assert_same_vectors(vectors, reference_vectors(docs_server.url, ["", "not empty"]))


def test_default_config_against_model_ids_says_what_to_do(model_ids_server, tiktoken_offline):
    """--token-ids model: cl100k ids past the model's vocabulary are a 400 that names both ways out."""
    embeddings = langchain_openai.OpenAIEmbeddings(model=MODEL, base_url=model_ids_server.url + "/v1",
                                                   api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError) as info:
        embeddings.embed_documents(load_texts(5))
    assert info.value.status_code == 400
    assert info.value.param == "input"
    assert "--token-ids cl100k" in info.value.message
    assert "check_embedding_ctx_length=False" in info.value.message


@pytest.mark.parametrize("chunk_size", [1000, 16])
def test_text_config(server, chunk_size):
    """check_embedding_ctx_length=False: strings on the wire, `chunk_size` per request."""
    texts = load_texts(100)
    embeddings = langchain_openai.OpenAIEmbeddings(
        model=MODEL, base_url=server.url + "/v1", api_key="unused", check_embedding_ctx_length=False,
        chunk_size=chunk_size,
    )
    bodies = sent_bodies(embeddings)
    vectors = embeddings.embed_documents(texts)
    assert len(bodies) == -(-len(texts) // chunk_size)
    assert all(isinstance(t, str) for body in bodies for t in body["input"])
    assert_same_vectors(vectors, reference_vectors(server.url, texts))


def test_default_config_long_text_is_chunked_and_averaged(docs_server, tiktoken_offline):
    """Past 8191 ids LangChain sends chunks and averages their vectors, weighted by chunk length."""
    import tiktoken

    encoding = tiktoken.get_encoding("cl100k_base")
    text = " ".join(load_texts(400))
    ids = encoding.encode_ordinary(text)[:10_000]
    text = encoding.decode(ids)
    ids = encoding.encode_ordinary(text)
    chunks = [ids[:8191], ids[8191:]]
    assert len(chunks[1]) > 0
    embeddings = langchain_openai.OpenAIEmbeddings(model=MODEL, base_url=docs_server.url + "/v1", api_key="unused")
    (vector,) = embeddings.embed_documents([text])
    parts = reference_vectors(docs_server.url, [encoding.decode(c) for c in chunks])
    average = np.average(parts, axis=0, weights=[len(c) for c in chunks])
    assert_same_vectors([vector], (average / np.linalg.norm(average))[None, :])
