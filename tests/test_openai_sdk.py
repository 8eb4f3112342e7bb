"""The official openai package against the real server process on loopback."""

from __future__ import annotations

import numpy as np
import openai
import pytest

MODEL = "sentence-transformers/all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def test_default_call_uses_base64_and_matches_engine(client, default_engine):
    texts = ["The quick brown fox.", "Embeddings map text to vectors."]
    response = client.embeddings.create(model=MODEL, input=texts)  # the SDK asks for base64
    got = np.array([d.embedding for d in response.data], dtype=np.float32)
    np.testing.assert_allclose(got, default_engine.embed(texts), atol=1e-5)
    assert response.model == MODEL
    assert response.usage.prompt_tokens == response.usage.total_tokens > 0


def test_float_format(client, default_engine):
    response = client.embeddings.create(model=MODEL, input="hello", encoding_format="float")
    assert len(response.data) == 1 and response.data[0].index == 0
    np.testing.assert_allclose(response.data[0].embedding, default_engine.embed(["hello"])[0], atol=1e-6)


def test_dimensions_truncate_and_renormalise(client, default_engine):
    response = client.embeddings.create(model=MODEL, input="matryoshka", dimensions=64)
    got = np.array(response.data[0].embedding)
    full = default_engine.embed(["matryoshka"])[0][:64]
    assert got.shape == (64,)
    np.testing.assert_allclose(got, full / np.linalg.norm(full), atol=1e-5)


def test_batch_of_100_in_order(client, default_engine, texts):
    batch = texts[1000:1100]
    response = client.embeddings.create(model=MODEL, input=batch)
    assert [d.index for d in response.data] == list(range(100))
    got = np.array([d.embedding for d in response.data], dtype=np.float32)
    np.testing.assert_allclose(got, default_engine.embed(batch), atol=2e-5)


def test_token_id_input(client, default_engine):
    """Token ids are cl100k_base's (OpenAI's): decoded, then embedded and counted as the model's tokens."""
    from compat.tiktoken_ids import load_cl100k

    text, prefix = "token ids are read as OpenAI's", "token ids"
    ids = load_cl100k().encode_ordinary(text)
    num_prefix_ids = len(load_cl100k().encode_ordinary(prefix))
    single = client.embeddings.create(model=MODEL, input=ids)
    nested = client.embeddings.create(model=MODEL, input=[ids, ids[:num_prefix_ids]])
    expected = default_engine.embed([text, prefix])
    np.testing.assert_allclose(single.data[0].embedding, expected[0], atol=1e-5)
    np.testing.assert_allclose(nested.data[1].embedding, expected[1], atol=1e-5)
    model_counts = [len(s) for s in default_engine.tokenize([text, prefix])]
    assert single.usage.prompt_tokens == model_counts[0]
    assert nested.usage.prompt_tokens == sum(model_counts)


def test_models_list(client):
    assert [m.id for m in client.models.list().data] == [MODEL]


def test_errors_surface_as_sdk_exceptions(client):
    with pytest.raises(openai.NotFoundError) as exc:
        client.embeddings.create(model="no-such-model", input="x")
    assert exc.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError) as exc:
        client.embeddings.create(model=MODEL, input=[])
    assert exc.value.body["param"] == "input"
