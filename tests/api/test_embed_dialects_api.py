"""Cohere's /v2/embed and /v1/embed and TEI's /embed on the fake engine, in process: the answers'
shapes, vectors equal to the fake's one-text-at-a-time reference (prompts, truncation, dimensions,
every Cohere type a model serves), and each request that cannot be served exactly refused with a
400 naming its field (tests/support/fake_engine.py)."""

from __future__ import annotations

import base64
from dataclasses import replace

import numpy as np
import pytest

from rose_embed.compat.quantize import int8_tanh, packed_sign_bits
from rose_embed.engine.model_files.st_modules import Normalize
from tests.support.client_support import API_KEYS
from tests.conftest import load_texts
from tests.support.fake_engine import FakeEngine, fake_config, serve
from tests.support.helpers import assert_envelope

PROMPTS = {"query": "query: ", "document": "passage: "}
MAX_LEN = 64  # short, so that a text past it is easy to write
ATOL = 1e-6


@pytest.fixture(scope="module")
def fake() -> FakeEngine:
    return FakeEngine(prompts=PROMPTS, max_seq_len=MAX_LEN)


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return [t[:60] for t in load_texts(7)]  # several texts, each within the limit


def _unit(vectors: np.ndarray) -> np.ndarray:
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _long_text(fake: FakeEngine) -> str:
    text = " ".join(["word"] * 3 * MAX_LEN)
    assert len(fake.tokenizer.encode_untruncated([text])[0]) > MAX_LEN
    return text


# ---- Cohere ------------------------------------------------------------------------------------------

def test_v2_float_and_base64_with_the_query_prompt(client, fake, texts):
    r = client.post("/v2/embed", json={"texts": texts, "input_type": "search_query",
                                       "embedding_types": ["float", "base64"], "model": fake.spec.name})
    assert r.status_code == 200, r.text
    body = r.json()
    expected = fake.embed(["query: " + t for t in texts])
    assert set(body["embeddings"]) == {"float", "base64"}
    np.testing.assert_allclose(body["embeddings"]["float"], expected, atol=ATOL)
    decoded = [np.frombuffer(base64.b64decode(s), "<f4") for s in body["embeddings"]["base64"]]
    np.testing.assert_allclose(decoded, expected, atol=ATOL)
    assert body["texts"] == texts and body["id"] and body["response_type"] == "embeddings_by_type"
    num_tokens = sum(len(s) for s in fake.tokenize(["query: " + t for t in texts]))
    assert body["meta"] == {"api_version": {"version": "2"}, "billed_units": {"input_tokens": num_tokens}}


@pytest.mark.parametrize("input_type,prompt", [("search_document", "passage: "), (None, "")])
def test_input_type_picks_the_prompt(client, fake, texts, input_type, prompt):
    body = {"texts": texts[:3], **({"input_type": input_type} if input_type else {})}
    got = client.post("/v2/embed", json=body).json()["embeddings"]["float"]
    np.testing.assert_allclose(got, fake.embed([prompt + t for t in texts[:3]]), atol=ATOL)


def test_inputs_form_is_the_texts_form(client, fake, texts):
    inputs = [{"content": [{"type": "text", "text": t}]} for t in texts[:3]]
    body = client.post("/v2/embed", json={"inputs": inputs, "embedding_types": ["float"]}).json()
    np.testing.assert_allclose(body["embeddings"]["float"], fake.embed(texts[:3]), atol=ATOL)
    assert body["texts"] == texts[:3]


def test_v1_without_types_answers_floats_shape(client, fake, texts):
    body = client.post("/v1/embed", json={"texts": texts[:2]}).json()
    assert body["response_type"] == "embeddings_floats" and body["meta"]["api_version"]["version"] == "1"
    np.testing.assert_allclose(body["embeddings"], fake.embed(texts[:2]), atol=ATOL)
    typed = client.post("/v1/embed", json={"texts": texts[:2], "embedding_types": ["float"]}).json()
    assert typed["response_type"] == "embeddings_by_type"
    np.testing.assert_allclose(typed["embeddings"]["float"], fake.embed(texts[:2]), atol=ATOL)


def test_output_dimension_cuts_and_renormalises(client, fake, texts):
    got = client.post("/v2/embed", json={"texts": texts[:3], "output_dimension": 16}).json()["embeddings"]["float"]
    np.testing.assert_allclose(got, _unit(fake.embed(texts[:3])[:, :16]), atol=ATOL)


def test_truncate_end_cuts_and_none_refuses(client, fake):
    text = _long_text(fake)
    got = client.post("/v2/embed", json={"texts": [text]}).json()["embeddings"]["float"]
    np.testing.assert_allclose(got, fake.embed([text]), atol=ATOL)  # the fake tokenizes at the limit
    error = assert_envelope(client.post("/v2/embed", json={"texts": ["short", text], "truncate": "NONE"}), 400,
                            "context_length_exceeded")
    assert error["param"] == "texts" and "truncate" in error["message"]


@pytest.mark.parametrize("body,param", [
    ({"texts": ["a"], "images": ["data:image/png;base64,AAAA"]}, "images"),
    ({"inputs": [{"content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}]}, "inputs"),
    ({"inputs": [{"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]}, "inputs"),
    ({"texts": ["a"], "inputs": [{"content": [{"type": "text", "text": "a"}]}]}, "inputs"),
    ({"texts": []}, "texts"),
    ({}, "texts"),
    ({"texts": "a"}, "texts"),
    ({"texts": ["a"], "embedding_types": ["int8"]}, "embedding_types"),
    ({"texts": ["a"], "embedding_types": ["float16"]}, "embedding_types"),
    ({"texts": ["a"], "embedding_types": []}, "embedding_types"),
    ({"texts": ["a"], "truncate": "START"}, "truncate"),
    ({"texts": ["a"], "truncate": "end"}, "truncate"),
    ({"texts": ["a"], "input_type": "image"}, "input_type"),
    ({"texts": ["a"], "input_type": "classification"}, "input_type"),  # a prompt this model lacks
    ({"texts": ["a"], "input_type": "query"}, "input_type"),  # not one of Cohere's
    ({"texts": ["a"], "output_dimension": 65}, "output_dimension"),
    ({"texts": ["a"], "max_tokens": 8}, "max_tokens"),
    ({"texts": ["a"], "model": ""}, "model"),
])
def test_cohere_refusals_name_the_field(client, body, param):
    assert assert_envelope(client.post("/v2/embed", json=body), 400)["param"] == param


def test_max_tokens_at_the_limit_and_priority_are_accepted(client, fake):
    r = client.post("/v2/embed", json={"texts": ["a"], "max_tokens": MAX_LEN, "priority": 3})
    np.testing.assert_allclose(r.json()["embeddings"]["float"], fake.embed(["a"]), atol=ATOL)


def test_langchain_cohere_body(client, fake, texts):
    """What langchain-cohere's CohereEmbeddings posts: v1, types named, `truncate` null."""
    r = client.post("/v1/embed", json={"texts": texts, "model": fake.spec.name, "input_type": "search_document",
                                       "embedding_types": ["float"], "truncate": None})
    assert r.status_code == 200, r.text
    assert r.json()["response_type"] == "embeddings_by_type"
    np.testing.assert_allclose(r.json()["embeddings"]["float"], fake.embed(["passage: " + t for t in texts]),
                               atol=ATOL)


def test_llamaindex_cohere_body(client, fake, texts):
    """What llama-index-embeddings-cohere's CohereEmbedding posts: v2, one of Cohere's model names (the
    only kind the class takes; here its default), `truncate` END."""
    r = client.post("/v2/embed", json={"texts": texts, "model": "embed-english-v3.0", "input_type": "search_query",
                                       "embedding_types": ["float"], "truncate": "END"})
    assert r.status_code == 200, r.text
    np.testing.assert_allclose(r.json()["embeddings"]["float"], fake.embed(["query: " + t for t in texts]),
                               atol=ATOL)


# ---- a quantising model: every Cohere type -------------------------------------------------------------

@pytest.fixture(scope="module")
def quantizing():
    fake = FakeEngine(dim=64, quantizing=True)
    with serve(fake) as client:
        yield fake, client


def test_every_type_of_a_quantising_model(quantizing, texts):
    fake, client = quantizing
    types = ["float", "int8", "uint8", "binary", "ubinary", "base64"]
    r = client.post("/v2/embed", json={"texts": texts, "embedding_types": types})
    assert r.status_code == 200, r.text
    got = r.json()["embeddings"]
    raw = fake.embed(texts)
    assert set(got) == set(types)
    np.testing.assert_allclose(got["float"], _unit(raw), atol=ATOL)
    assert got["int8"] == int8_tanh(raw).tolist()
    assert got["uint8"] == (int8_tanh(raw).astype(int) + 128).tolist()
    assert got["ubinary"] == packed_sign_bits(raw).tolist()
    assert got["binary"] == (packed_sign_bits(raw).astype(int) - 128).tolist()
    assert len(got["ubinary"][0]) == 64 // 8


# ---- TEI -----------------------------------------------------------------------------------------------

def test_tei_bare_list_for_a_text_and_for_a_batch(client, fake, texts):
    one = client.post("/embed", json={"inputs": texts[0]})
    assert one.status_code == 200, one.text
    assert isinstance(one.json(), list) and len(one.json()) == 1
    np.testing.assert_allclose(one.json(), fake.embed(texts[:1]), atol=ATOL)
    batch = client.post("/embed", json={"inputs": texts, "prompt_name": "query", "dimensions": 16}).json()
    np.testing.assert_allclose(batch, _unit(fake.embed(["query: " + t for t in texts])[:, :16]), atol=ATOL)


def test_tei_body_at_the_root_path(client, fake, texts):
    """huggingface_hub's InferenceClient(model=URL).feature_extraction posts TEI's body to the URL itself,
    as TEI serves its embedding model's embed at POST / too; GET / stays unserved."""
    for body in ({"inputs": texts}, {"inputs": texts, "normalize": True, "truncate": True,
                                     "truncation_direction": "right", "dimensions": 16}):
        r = client.post("/", json=body)
        assert r.status_code == 200, r.text
        assert r.json() == client.post("/embed", json=body).json()
    np.testing.assert_allclose(client.post("/", json={"inputs": texts[0]}).json(), fake.embed(texts[:1]), atol=ATOL)
    assert_envelope(client.post("/", json={"inputs": "a", "truncation_direction": "left"}), 400)
    assert client.get("/").status_code in (404, 405)


def test_tei_too_long_is_refused_unless_truncate(client, fake):
    text = _long_text(fake)
    error = assert_envelope(client.post("/embed", json={"inputs": [text]}), 400, "context_length_exceeded")
    assert error["param"] == "inputs" and "truncate" in error["message"]
    got = client.post("/embed", json={"inputs": [text], "truncate": True, "truncation_direction": "right"}).json()
    np.testing.assert_allclose(got, fake.embed([text]), atol=ATOL)


@pytest.mark.parametrize("body,param", [
    ({"inputs": [101, 2023, 102]}, "inputs"),
    ({"inputs": []}, "inputs"),
    ({}, "inputs"),
    ({"inputs": "a", "truncation_direction": "Left"}, "truncation_direction"),
    ({"inputs": "a", "normalize": "no"}, "normalize"),
    ({"inputs": "a", "normalize": False}, "normalize"),  # normalised on the device, with no Normalize module
    ({"inputs": "a", "prompt_name": "classification"}, "prompt_name"),
    ({"inputs": "a", "dimensions": 0}, "dimensions"),
])
def test_tei_refusals_name_the_field(client, body, param):
    assert assert_envelope(client.post("/embed", json=body), 400)["param"] == param


def test_tei_normalize_false_gives_the_models_own_vectors(quantizing, texts):
    fake, client = quantizing
    raw = fake.embed(texts)
    np.testing.assert_allclose(client.post("/embed", json={"inputs": texts, "normalize": False}).json(), raw,
                               rtol=1e-6)
    cut = client.post("/embed", json={"inputs": texts, "normalize": False, "dimensions": 8}).json()
    np.testing.assert_allclose(cut, raw[:, :8], rtol=1e-6)  # cut, not re-normalised
    np.testing.assert_allclose(client.post("/embed", json={"inputs": texts}).json(), _unit(raw), atol=ATOL)


def test_tei_normalize_false_where_the_modules_end_in_normalize(texts):
    fake = FakeEngine()
    fake.spec = replace(fake.spec, head=(Normalize(),))
    with serve(fake) as client:
        got = client.post("/embed", json={"inputs": texts[:3], "normalize": False, "dimensions": 8}).json()
    np.testing.assert_allclose(got, fake.embed(texts[:3])[:, :8], atol=ATOL)


# ---- keys and metrics ----------------------------------------------------------------------------------

def test_keys_guard_and_metrics_count_every_route():
    fake = FakeEngine()
    with serve(fake, fake_config(api_keys=API_KEYS)) as client:
        for path, body in (("/v2/embed", {"texts": ["a"]}), ("/v1/embed", {"texts": ["a"]}), ("/embed", {"inputs": "a"}),
                           ("/", {"inputs": "a"})):
            assert_envelope(client.post(path, json=body), 401, "invalid_api_key")
            r = client.post(path, json=body, headers={"Authorization": f"Bearer {API_KEYS[0]}"})
            assert r.status_code == 200, r.text
        metrics = client.get("/metrics").text
    for path in ("/v2/embed", "/v1/embed", "/embed", "/"):
        assert f'rose_requests_total{{model="{fake.spec.name}",route="{path}",status="200"}} 1.0' in metrics
