"""LangChain's CohereEmbeddings (langchain-cohere) and LlamaIndex's CohereEmbedding
(llama-index-embeddings-cohere) against the real server, vectors compared with sentence-transformers.

Both packages pin Cohere's SDK below the major version the test extra installs, so they are not in
it and these tests run where they are installed; tests/api/test_embed_dialects_api.py replays the
bodies they send on every run.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.support.client_support import MODEL, assert_close_to_st
from tests.conftest import load_texts

pytestmark = pytest.mark.slow  # the real model in a real server process

QUERY = "How do I read a file line by line?"


# Session-scoped, so that a missing package skips before the server fixture starts a server.
@pytest.fixture(scope="session")
def langchain_cohere():
    return pytest.importorskip("langchain_cohere")


@pytest.fixture(scope="session")
def cohere_embedding():
    return pytest.importorskip("llama_index.embeddings.cohere")


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return load_texts(300)


def test_langchain_cohere_embeddings(langchain_cohere, server, st_reference, texts):
    """POST /v1/embed, 96 texts at a time, `truncate: null`, `input_type` search_document or search_query."""
    embeddings = langchain_cohere.CohereEmbeddings(base_url=server.url, model=MODEL, cohere_api_key="unused")
    assert_close_to_st(embeddings.embed_documents(texts), st_reference.encode(texts, normalize_embeddings=True))
    assert_close_to_st([embeddings.embed_query(QUERY)], st_reference.encode([QUERY], normalize_embeddings=True))
    vectors = asyncio.run(embeddings.aembed_documents(texts[:20]))
    assert_close_to_st(vectors, st_reference.encode(texts[:20], normalize_embeddings=True))


def test_llamaindex_cohere_embedding(cohere_embedding, server, st_reference, texts):
    """POST /v2/embed as `embed-english-v3.0`, the only kind of name the class takes (Cohere's), which the
    server's default model answers."""
    embed_model = cohere_embedding.CohereEmbedding(base_url=server.url, api_key="unused")
    assert embed_model.model_name == "embed-english-v3.0"
    vectors = embed_model.get_text_embedding_batch(texts)
    assert_close_to_st(vectors, st_reference.encode(texts, normalize_embeddings=True))
    assert_close_to_st([embed_model.get_query_embedding(QUERY)], st_reference.encode([QUERY],
                                                                                      normalize_embeddings=True))
    vectors = asyncio.run(embed_model.aget_text_embedding_batch(texts[:20]))
    assert_close_to_st(vectors, st_reference.encode(texts[:20], normalize_embeddings=True))
