"""The official openai package against the app in process (fake engine), through `http_client=`.

The sync client goes through Litestar's test client, the async one through httpx's ASGI
transport on the test's own event loop. test_client_openai.py runs the SDK end to end
against a real server process and the real model.
"""

from __future__ import annotations

import asyncio
import json

import numpy as np
import openai
import pytest

from rose_embed.compat.tiktoken_ids import load_cl100k
from tests.support.client_support import API_KEYS
from tests.support.fake_engine import BASE_URL, FAKE_MODEL, FakeEngine, fake_config, serve, serve_async

TEXTS = ["The quick brown fox.", "Embeddings map text to vectors.", ""]


@pytest.fixture(scope="module")
def fake() -> FakeEngine:
    return FakeEngine(dim=48)


@pytest.fixture(scope="module")
def http(fake):
    with serve(fake) as client:
        yield client


@pytest.fixture(scope="module")
def sent(http) -> list:
    """What the SDK put on the wire (bodies) and got back (statuses), in order."""
    record: list = []
    http.event_hooks = {"request": [lambda r: record.append(json.loads(r.content) if r.content else None)],
                        "response": [lambda r: record.append(r.status_code)]}
    return record


@pytest.fixture(scope="module")
def client(http, sent) -> openai.OpenAI:
    return openai.OpenAI(base_url=BASE_URL + "/v1", api_key="unused", http_client=http, max_retries=0)


def assert_vectors(embeddings, expected: np.ndarray) -> None:
    np.testing.assert_allclose(np.array(embeddings, dtype=np.float32), expected, atol=1e-6, rtol=0)


def test_default_call_uses_base64_and_matches_the_engine(client, fake, sent):
    sent.clear()
    response = client.embeddings.create(model=FAKE_MODEL, input=TEXTS)
    assert sent[0]["encoding_format"] == "base64" and sent[1] == 200  # the SDK's default, decoded by the SDK
    assert [d.index for d in response.data] == [0, 1, 2]
    assert_vectors([d.embedding for d in response.data], fake.embed(TEXTS))
    assert response.model == FAKE_MODEL
    assert response.usage.prompt_tokens == response.usage.total_tokens == sum(map(len, fake.tokenize(TEXTS)))


def test_float_format(client, fake):
    response = client.embeddings.create(model=FAKE_MODEL, input="hello", encoding_format="float")
    assert len(response.data) == 1 and response.data[0].index == 0
    assert_vectors([response.data[0].embedding], fake.embed(["hello"]))


@pytest.mark.parametrize("dimensions", [1, 16, 47, 48])
def test_dimensions_truncate_and_renormalise(client, fake, dimensions):
    response = client.embeddings.create(model=FAKE_MODEL, input=TEXTS, dimensions=dimensions)
    full = fake.embed(TEXTS)[:, :dimensions]
    assert_vectors([d.embedding for d in response.data], full / np.linalg.norm(full, axis=1, keepdims=True))


def test_batch_of_100_in_order(client, fake):
    batch = [f"text {i} " + "word " * (i % 17) for i in range(100)]
    response = client.embeddings.create(model=FAKE_MODEL, input=batch)
    assert [d.index for d in response.data] == list(range(100))
    assert_vectors([d.embedding for d in response.data], fake.embed(batch))


def test_token_id_input(client, fake):
    """Token ids are cl100k_base's (OpenAI's): decoded, then embedded and counted as the model's tokens."""
    text, prefix = "token ids are read as OpenAI's", "token ids"
    ids = load_cl100k().encode_ordinary(text)
    num_prefix_ids = len(load_cl100k().encode_ordinary(prefix))
    single = client.embeddings.create(model=FAKE_MODEL, input=ids)
    nested = client.embeddings.create(model=FAKE_MODEL, input=[ids, ids[:num_prefix_ids]])
    assert_vectors([single.data[0].embedding], fake.embed([text]))
    assert_vectors([d.embedding for d in nested.data], fake.embed([text, prefix]))
    model_counts = [len(s) for s in fake.tokenize([text, prefix])]
    assert single.usage.prompt_tokens == model_counts[0]
    assert nested.usage.prompt_tokens == sum(model_counts)


def test_models_list_and_retrieve(client):
    assert [m.id for m in client.models.list().data] == [FAKE_MODEL]
    assert client.models.retrieve(FAKE_MODEL).id == FAKE_MODEL


def test_errors_surface_as_sdk_exceptions_and_are_not_retried(http, sent, fake):
    client = openai.OpenAI(base_url=BASE_URL + "/v1", api_key="unused", http_client=http, max_retries=2)
    sent.clear()
    with pytest.raises(openai.NotFoundError) as exc:
        client.embeddings.create(model="no-such-model", input="x")
    assert exc.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError) as exc:
        client.embeddings.create(model=FAKE_MODEL, input=[])
    assert exc.value.body["param"] == "input"
    assert sent[1::2] == [404, 400]  # one request each: a 4xx is not retried


def test_api_keys(fake):
    with serve(fake, fake_config(api_keys=API_KEYS)) as http:
        good = openai.OpenAI(base_url=BASE_URL + "/v1", api_key=API_KEYS[1], http_client=http, max_retries=0)
        assert_vectors([good.embeddings.create(model=FAKE_MODEL, input="x").data[0].embedding], fake.embed(["x"]))
        bad = openai.OpenAI(base_url=BASE_URL + "/v1", api_key="sk-wrong", http_client=http, max_retries=0)
        with pytest.raises(openai.AuthenticationError) as exc:
            bad.embeddings.create(model=FAKE_MODEL, input="x")
        assert exc.value.body["code"] == "invalid_api_key"


def test_async_client_with_concurrent_requests(fake):
    """AsyncOpenAI over httpx.ASGITransport: 20 requests at once share batches, each gets its own vectors."""
    requests = [[f"request {i} text {j}" for j in range(i % 4 + 1)] for i in range(20)]

    async def scenario():
        async with serve_async(fake) as http:
            client = openai.AsyncOpenAI(base_url=BASE_URL + "/v1", api_key="unused", http_client=http, max_retries=0)
            return await asyncio.gather(*[client.embeddings.create(model=FAKE_MODEL, input=texts)
                                          for texts in requests])

    fake.batches.clear()
    responses = asyncio.run(scenario())
    for texts, response in zip(requests, responses):
        assert [d.index for d in response.data] == list(range(len(texts)))
        assert_vectors([d.embedding for d in response.data], fake.embed(texts))
    assert sum(n for n, _ in fake.batches) == sum(map(len, requests))
    assert len(fake.batches) < len(requests)  # batches formed across requests



def test_a_sparse_model_answers_the_sdks_default_call_with_its_pairs():
    """The SDK asks for base64 unless told otherwise; a sparse model's answer, an object of numbers,
    comes through it as it is (docs/sparse.md)."""
    from tests.support.fake_sparse import FAKE_SPARSE, FakeSparse

    sparse = FakeSparse()
    with serve(sparse) as http:
        client = openai.OpenAI(base_url=BASE_URL + "/v1", api_key="unused", http_client=http, max_retries=0)
        for options in ({}, {"encoding_format": "float"}):
            got = client.embeddings.create(model=FAKE_SPARSE, input=TEXTS[:2], **options)
            for item, (indices, values) in zip(got.data, sparse.pairs_of(TEXTS[:2]), strict=True):
                assert item.object == "sparse_embedding"
                assert item.embedding["indices"] == indices.tolist()
                np.testing.assert_allclose(item.embedding["values"], values, rtol=1e-6)
