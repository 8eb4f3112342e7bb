"""POST /v1/contextualizedembeddings on the fake engine (tests/support/fake_engine.py), in process.

The fake's tokenizer is the default model's (limit 256: [CLS] + 254 word pieces + [SEP]); its
vector of a span of tokens depends on every id and on each token's position in its window,
so windows, positions and which tokens each chunk pools are all checked. Every expected vector
is built here from an untruncated tokenizer of our own and the fake's `span_vector`, not from
engine/text/late_chunking.py.
"""

from __future__ import annotations

import asyncio
import base64
import json
from dataclasses import replace

import numpy as np
import pytest
from tokenizers import Tokenizer

from rose_embed.compat.quantize import int8_tanh, packed_sign_bits
from rose_embed.corpus.job import CorpusJob, run_job
from rose_embed.engine.contract.config import EngineConfig
from tests.support.fake_engine import FAKE_MODEL, FakeEngine, fake_config, serve, serve_async
from tests.support.helpers import assert_envelope

CLS, SEP = 101, 102
ROOM = 254
ROUTE = "/v1/contextualizedembeddings"


@pytest.fixture(scope="module")
def fake() -> FakeEngine:
    return FakeEngine(prompts={"query": "query: "})


@pytest.fixture(scope="module")
def client(fake):
    with serve(fake) as c:
        yield c


@pytest.fixture(scope="module")
def documents(texts) -> list[list[str]]:
    """Paragraphs as chunks: a short document, one of a single chunk, one past the limit (3 windows)."""
    return [texts[0:3], [texts[5]], texts[100:119]]


def expected(fake: FakeEngine, untruncated: Tokenizer, documents: list[list[str]], prompt: str = "",
             room: int = ROOM) -> tuple[np.ndarray, int, list[int]]:
    """(chunk vectors, tokens read, windows per document): chunks laid end to end, greedily
    into windows of [CLS] + prompt + chunks + [SEP]."""
    prompt_ids = untruncated.encode(prompt.strip(), add_special_tokens=False).ids if prompt else []
    room -= len(prompt_ids)
    out, num_tokens, num_windows = [], 0, []
    for document in documents:
        chunks = [untruncated.encode(c.strip(), add_special_tokens=False).ids[:room] for c in document]
        windows, current = [], []
        for chunk in chunks:
            if current and sum(map(len, current)) + len(chunk) > room:
                windows.append(current)
                current = []
            current.append(chunk)
        windows.append(current)
        num_windows.append(len(windows))
        for window in windows:
            ids = np.array([CLS, *prompt_ids, *(t for c in window for t in c), SEP])
            num_tokens += len(ids)
            start = 1 + len(prompt_ids)
            for chunk in window:
                out.append(fake.span_vector(ids, start, start + len(chunk)))
                start += len(chunk)
    return np.stack(out), num_tokens, num_windows


def chunk_vectors(response) -> np.ndarray:
    assert response.status_code == 200, response.text
    return np.array([c["embedding"] for d in response.json()["data"] for c in d["data"]], dtype=np.float32)


def post(client, body: dict):
    return client.post(ROUTE, json=body)


# ---- what comes back -------------------------------------------------------------------------------


def test_each_chunk_is_pooled_over_its_own_tokens_in_its_documents_windows(client, fake, untruncated, documents):
    r = post(client, {"input": documents, "model": FAKE_MODEL})
    body = r.json()
    assert body["object"] == "list" and body["model"] == FAKE_MODEL
    assert [(d["object"], d["index"], len(d["data"])) for d in body["data"]] == \
        [("list", i, len(d)) for i, d in enumerate(documents)]
    assert all([c["object"] for c in d["data"]] == ["embedding"] * len(d["data"]) and
               [c["index"] for c in d["data"]] == list(range(len(d["data"]))) for d in body["data"])
    vectors, num_tokens, num_windows = expected(fake, untruncated, documents)
    assert num_windows == [1, 1, 3]  # what the documents are for
    np.testing.assert_allclose(chunk_vectors(r), vectors, rtol=0, atol=1e-6)
    assert body["usage"] == {"prompt_tokens": num_tokens, "total_tokens": num_tokens}


def test_the_prompt_follows_cls_in_every_window_and_is_in_no_chunk(client, fake, untruncated, documents):
    r = post(client, {"input": documents[2:], "input_type": "query"})
    vectors, num_tokens, _ = expected(fake, untruncated, documents[2:], "query: ")
    np.testing.assert_allclose(chunk_vectors(r), vectors, rtol=0, atol=1e-6)
    assert r.json()["usage"]["total_tokens"] == num_tokens


def test_voyage_spelling_reads_the_same_documents(untruncated, documents):
    fake = FakeEngine()  # no prompts, as pplx-embed: Voyage's input_type changes nothing
    vectors, _, _ = expected(fake, untruncated, documents[:2])
    cut = vectors[:, :16] / np.linalg.norm(vectors[:, :16], axis=1, keepdims=True)
    with serve(fake) as client:
        r = post(client, {"inputs": documents[:2], "output_dimension": 16, "output_dtype": "float",
                          "encoding_format": "base64", "input_type": "document"})
        floats = chunk_vectors(post(client, {"inputs": documents[:2], "output_dtype": "float"}))
    assert r.status_code == 200, r.text
    decoded = [np.frombuffer(base64.b64decode(c["embedding"]), "<f4") for d in r.json()["data"] for c in d["data"]]
    np.testing.assert_allclose(np.stack(decoded), cut, atol=1e-6)
    np.testing.assert_allclose(floats, vectors, atol=1e-6)


def test_a_quantising_model_answers_base64_int8_by_default(untruncated, documents):
    fake = FakeEngine(quantizing=True)
    raw, _, _ = expected(fake, untruncated, documents)  # the fake's raw (unnormalised) vectors
    with serve(fake) as client:
        default = post(client, {"input": documents}).json()
        voyage = post(client, {"inputs": documents, "output_dtype": "int8"}).json()
        packed = post(client, {"inputs": documents, "output_dtype": "ubinary", "encoding_format": "base64"}).json()
        floats = chunk_vectors(post(client, {"input": documents, "encoding_format": "float"}))
    int8 = int8_tanh(raw.astype(np.float32))
    got = [np.frombuffer(base64.b64decode(c["embedding"]), np.int8) for d in default["data"] for c in d["data"]]
    np.testing.assert_array_equal(np.stack(got), int8)
    assert [c["embedding"] for d in voyage["data"] for c in d["data"]] == int8.tolist()
    bits = [np.frombuffer(base64.b64decode(c["embedding"]), np.uint8) for d in packed["data"] for c in d["data"]]
    np.testing.assert_array_equal(np.stack(bits), packed_sign_bits(raw.astype(np.float32)))
    np.testing.assert_allclose(floats, raw / np.linalg.norm(raw, axis=1, keepdims=True), atol=1e-6)


def test_a_window_pools_at_most_max_batch_seqs_chunks(fake, untruncated):
    document = [f"chunk number {i}" for i in range(30)]
    config = fake_config(engine=EngineConfig(device="cpu", max_batch_tokens=4096, max_batch_seqs=8))
    before = len(fake.batches)
    with serve(fake, config) as client:
        r = post(client, {"input": [document, ["another document"]]})
        plain = client.post("/v1/embeddings", json={"input": ["a text"] * 20})
    assert plain.status_code == 200
    got = chunk_vectors(r)
    assert got.shape == (31, fake.dimensions)
    # Windows of 8, 8, 8, 6 chunks: each chunk's positions are those of its own window.
    windows = [document[lo: lo + 8] for lo in range(0, 30, 8)]
    vectors = np.concatenate([expected(fake, untruncated, [w])[0] for w in windows])
    np.testing.assert_allclose(got[:30], vectors, atol=1e-6)
    assert all(n <= 8 for n in fake.outputs[before:]), fake.outputs[before:]


def test_ordinary_embeddings_sharing_batches_are_unchanged(fake, untruncated, documents, texts):
    """Both routes at once, so that ordinary inputs and windows are packed into the same batches."""
    async def both():
        async with serve_async(fake) as client:
            return await asyncio.gather(client.post("/v1/embeddings", json={"input": texts[200:230]}),
                                        client.post(ROUTE, json={"input": documents}),
                                        client.post("/v1/embeddings", json={"input": texts[230:260]}))

    first, contextual, second = asyncio.run(both())
    np.testing.assert_allclose(np.array([d["embedding"] for d in first.json()["data"]]),
                               fake.embed(texts[200:230]), rtol=0, atol=1e-6)
    np.testing.assert_allclose(np.array([d["embedding"] for d in second.json()["data"]]),
                               fake.embed(texts[230:260]), rtol=0, atol=1e-6)
    np.testing.assert_allclose(chunk_vectors(contextual), expected(fake, untruncated, documents)[0], atol=1e-6)


# ---- errors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("body,param,words", [
    ({}, "input", "non-empty array of documents"),
    ({"input": "a text"}, "input", "got str"),
    ({"input": []}, "input", "got an empty array"),
    ({"input": ["a", "b"]}, "input", "'input[0]' must be a non-empty array"),
    ({"input": [["a"], []]}, "input", "'input[1]' must be a non-empty array"),
    ({"inputs": [["a", 3]]}, "inputs", "'inputs[0][1]' must be a string"),
    ({"input": [["a", None]]}, "input", "got null"),
    ({"input": [["a", ""]]}, "input", "'input[0][1]' is an empty string"),
    ({"input": [["a"]], "inputs": [["b"]]}, "inputs", "not both"),
    ({"input": [["a"]] * 513}, "input", "at most 512"),
    ({"input": [["a"] * 8000, ["b"] * 8001]}, "input", "16001 chunks"),
    ({"input": [["fine", " \t "]]}, "input", "'input[0][1]' gives no tokens"),
    ({"input": [["a"]], "dimensions": "8"}, "dimensions", "Expected `int | null`"),
    ({"input": [["a"]], "dimensions": 0}, "dimensions", "between 1 and 64"),
    ({"input": [["a"]], "output_dimension": 65}, "output_dimension", "between 1 and 64"),
    ({"input": [["a"]], "dimensions": 8, "output_dimension": 16}, "output_dimension", "not both"),
    ({"input": [["a"]], "encoding_format": "int8"}, "encoding_format", "must be one of float, base64"),
    ({"input": [["a"]], "output_dtype": "float16"}, "output_dtype", "must be one of float, int8"),
    ({"input": [["a"]], "output_dtype": "int8"}, "output_dtype", "writes only the formats float, base64"),
    ({"input": [["a"]], "output_dtype": "uint8", "encoding_format": "base64"}, "encoding_format", "base64 goes with"),
    ({"input": [["a"]], "input_type": "nope", "prompt_name": "other"}, "prompt_name", "not both"),
    ({"input": [["a"]], "long_inputs": "split"}, "long_inputs", "must be one of truncate, chunk, error"),
])
def test_malformed_requests_are_400s_naming_the_field(client, body, param, words):
    error = assert_envelope(post(client, body), 400)
    assert error["param"] == param and words in error["message"], error


def test_an_unknown_model_is_openais_404(client):
    error = assert_envelope(post(client, {"input": [["a"]], "model": "another-model"}), 404, "model_not_found")
    assert error["param"] == "model"


@pytest.mark.parametrize("change,words", [
    (dict(pooling="cls"), "its pooling is 'cls'"),
    (dict(pooling="last", is_causal=True), "its attention is causal"),
    (dict(pooling="mean+max"), "its pooling is 'mean+max'"),
])
def test_a_model_that_cannot_late_chunk_is_a_400_that_says_why(change, words):
    fake = FakeEngine()
    fake.spec = replace(fake.spec, **change)
    with serve(fake) as client:
        error = assert_envelope(post(client, {"input": [["a", "b"]]}), 400, "model_cannot_late_chunk")
        assert client.post("/v1/embeddings", json={"input": "still served"}).status_code == 200
    assert error["param"] == "model" and words in error["message"] and "/v1/embeddings" in error["message"]


def test_a_chunk_past_the_limit_follows_long_inputs(fake, untruncated, texts):
    long_chunk = "\n\n".join(texts[300:310])
    assert len(untruncated.encode(long_chunk, add_special_tokens=False).ids) > ROOM  # what it is for
    document = [["A first chunk.", long_chunk, "A last chunk."]]
    with serve(fake, fake_config(long_inputs="error")) as client:
        error = assert_envelope(post(client, {"input": document}), 400)
        truncated = chunk_vectors(post(client, {"input": document, "long_inputs": "truncate"}))
        cut = post(client, {"input": document, "long_inputs": "chunk"})
    assert "maximum context length is 256 tokens" in error["message"]
    np.testing.assert_allclose(truncated, expected(fake, untruncated, document)[0], atol=1e-6)
    # chunk: the long chunk cut across windows, its vector the token-weighted mean of its parts'.
    content = untruncated.encode(long_chunk, add_special_tokens=False).ids
    first = untruncated.encode("A first chunk.", add_special_tokens=False).ids
    last = untruncated.encode("A last chunk.", add_special_tokens=False).ids
    head = [CLS, *first, *content[: ROOM - len(first)]]
    assert ROOM - len(first) < len(content)
    parts, rest = [(np.array(head + [SEP]), 1 + len(first), len(head))], content[ROOM - len(first):]
    while rest:
        window = rest[:ROOM]
        rest = rest[ROOM:]
        tail = last if not rest and len(window) + len(last) <= ROOM else []
        parts.append((np.array([CLS, *window, *tail, SEP]), 1, 1 + len(window)))
    vectors = np.stack([fake.span_vector(ids, lo, hi) for ids, lo, hi in parts]).astype(np.float64)
    weights = np.array([hi - lo for _, lo, hi in parts], np.float64)
    mean = (vectors * weights[:, None]).sum(0) / weights.sum()
    np.testing.assert_allclose(chunk_vectors(cut)[1], mean / np.linalg.norm(mean), atol=1e-6)


def test_the_request_and_character_caps_apply(fake, documents):
    with serve(fake, fake_config(max_request_tokens=300, max_input_chars=5000)) as client:
        assert post(client, {"input": documents[:1]}).status_code == 200
        tokens = assert_envelope(post(client, {"input": documents}), 400, "max_tokens_per_request")
        chars = assert_envelope(post(client, {"input": [["x" * 5001]]}), 400, "input_too_long")
    assert "max 300 tokens" in tokens["message"] and "'input[0][0]' holds 5001 characters" in chars["message"]


# ---- the route among the others --------------------------------------------------------------------


def test_the_route_is_in_the_openapi_document_and_the_metrics(client):
    schema = client.get("/docs/openapi.json").json()
    operation = schema["paths"][ROUTE]["post"]
    request = operation["requestBody"]["content"]["application/json"]["schema"]
    assert {"input", "inputs", "dimensions", "output_dimension", "encoding_format", "output_dtype"} <= \
        set(request["properties"])
    assert "/contextualizedembeddings" in schema["paths"]
    post(client, {"input": [["counted"]]})
    metrics = client.get("/metrics").text
    assert f'rose_requests_total{{model="{FAKE_MODEL}",route="{ROUTE}",status="200"}}' in metrics


# ---- the corpus job --------------------------------------------------------------------------------


def test_corpus_job_writes_one_vector_per_chunk_as_the_route_answers(tmp_path, fake, client, documents):
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"id": i, "chunks": d}) + "\n" for i, d in enumerate(documents)),
                      encoding="utf-8")
    job = CorpusJob(input=source, output=tmp_path / "out.npy", output_format="npy", chunk_size=2,
                    id_field="id", chunks_field="chunks", quiet=True)
    report = run_job(fake, job)
    assert report.num_rows == len(documents)
    ours = np.load(tmp_path / "out.npy")
    np.testing.assert_allclose(ours, chunk_vectors(post(client, {"input": documents})), atol=1e-6)
    ids = [json.loads(line) for line in (tmp_path / "out.ids.jsonl").read_text().splitlines()]
    assert ids == [i for i, d in enumerate(documents) for _ in d]


@pytest.mark.parametrize("row,words", [
    ({"chunks": "one text"}, "must be a list of strings, not str"),
    ({"chunks": []}, "needs at least one chunk"),
    ({"chunks": ["a", ""]}, "its chunk 1 is an empty string"),
    ({"text": "no chunks"}, "has no 'chunks' field"),
])
def test_corpus_rows_that_are_no_documents_stop_the_job_naming_the_line(tmp_path, fake, row, words):
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps({"chunks": ["fine"]}) + "\n" + json.dumps(row) + "\n", encoding="utf-8")
    job = CorpusJob(input=source, output=tmp_path / "out.npy", output_format="npy", chunks_field="chunks", quiet=True)
    with pytest.raises(ValueError, match="line 2") as info:
        run_job(fake, job)
    assert words in str(info.value) and "--chunks-field" in str(info.value)
