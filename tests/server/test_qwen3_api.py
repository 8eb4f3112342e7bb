"""Qwen3 flavours served by the real server process, checked against Hugging Face through HTTP.

Tolerances: float vectors cosine >= 0.9999 against the fp32 reference (both run in fp32
on CPU; the difference is summation order); int8 / binary equal the reference's
quantisation exactly except where the reference value lies within 1e-3 of a rounding
boundary (there the two fp32 paths may legitimately round differently).
"""

from __future__ import annotations

import base64

import httpx
import numpy as np
import pytest
import torch
from tokenizers import Tokenizer

from tests.conftest import ServerProcess, load_texts
from tests.support.qwen3_checkpoints import QUERY_PROMPT, pplx_embed, qwen3_embedding, reference_pooled, train_tokenizer

pytestmark = pytest.mark.slow  # Qwen3 checkpoints served by real server processes

COSINE = 0.9999
BOUNDARY = 1e-3


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    return load_texts(400)


@pytest.fixture(scope="module")
def tok(corpus):
    return train_tokenizer(corpus[:300])


@pytest.fixture(scope="module")
def mixed_texts(corpus) -> list[str]:
    """Different lengths in one request: a word, sentences, paragraphs, one past the 256-token
    limit, and whitespace around a text (byte-level BPE keeps it as tokens)."""
    texts = ["x", "Return the sum.", "  Return the sum.\n", *corpus[300:309]]
    texts.append(max(corpus, key=len))
    return texts


def _serve(ckpt, *args):
    return ServerProcess("--dtype", "float32", "--model", str(ckpt.path), "--max-batch-tokens", "2048", *args)


@pytest.fixture(scope="module")
def causal(tmp_path_factory, tok):
    ckpt = qwen3_embedding(tmp_path_factory.mktemp("qwen3-emb"), tok, matryoshka=[16, 32])
    server = _serve(ckpt)
    yield ckpt, server
    server.stop()


@pytest.fixture(scope="module")
def bidirectional(tmp_path_factory, tok):
    ckpt = pplx_embed(tmp_path_factory.mktemp("pplx"), tok)
    server = _serve(ckpt)
    yield ckpt, server
    server.stop()


def _post(server, **body) -> httpx.Response:
    return httpx.post(server.url + "/v1/embeddings", json=body, timeout=60)


def _floats(server, texts, **extra) -> tuple[np.ndarray, dict]:
    r = _post(server, input=texts, **extra)
    assert r.status_code == 200, r.text
    body = r.json()
    assert [d["index"] for d in body["data"]] == list(range(len(body["data"])))
    return np.array([d["embedding"] for d in body["data"]], dtype=np.float64), body["usage"]


def _cosines(ours: np.ndarray, reference: torch.Tensor) -> np.ndarray:
    ref = reference.detach().double().numpy()
    return (ours * ref).sum(1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(ref, axis=1))


def test_causal_single_texts_match_reference(causal, mixed_texts):
    ckpt, server = causal
    for text in mixed_texts[:5]:
        ours, usage = _floats(server, text)
        ref, counts = reference_pooled(ckpt, [text])
        assert _cosines(ours, ref).min() >= COSINE
        assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
        assert usage["prompt_tokens"] == counts[0]


def test_causal_mixed_batch_matches_reference(causal, mixed_texts):
    ckpt, server = causal
    ours, usage = _floats(server, mixed_texts)
    ref, counts = reference_pooled(ckpt, mixed_texts)
    assert _cosines(ours, ref).min() >= COSINE
    assert usage["prompt_tokens"] == sum(counts)
    assert max(counts) == 256  # the long text was truncated, end token kept


def test_causal_texts_end_with_the_end_token(causal):
    ckpt, server = causal
    # Last-token pooling reads the end token; without it the vector is another one.
    with_end, _ = reference_pooled(ckpt, ["Return the sum."])
    ids = ckpt.tokenizer.encode("Return the sum.").ids
    assert ids[-1] == ckpt.tokenizer.token_to_id("<|endoftext|>")
    without_end = ckpt.reference(input_ids=torch.tensor([ids[:-1]])).last_hidden_state[0, -1:]
    ours, _ = _floats(server, "Return the sum.")
    assert _cosines(ours, with_end).min() >= COSINE
    assert _cosines(ours, without_end).max() < 0.99


def test_query_prompt_by_prompt_name_and_input_type(causal, mixed_texts):
    ckpt, server = causal
    texts = mixed_texts[2:5]
    ref, counts = reference_pooled(ckpt, texts, prompt=QUERY_PROMPT)
    plain, plain_counts = reference_pooled(ckpt, texts)
    for field in ("prompt_name", "input_type"):
        ours, usage = _floats(server, texts, **{field: "query"})
        assert _cosines(ours, ref).min() >= COSINE
        assert _cosines(ours, plain).max() < 0.999
        assert usage["prompt_tokens"] == sum(counts) > sum(plain_counts)  # prompt tokens count
    ours, usage = _floats(server, texts, input_type="document")  # the model's "document" prompt is ""
    assert _cosines(ours, plain).min() >= COSINE
    assert usage["prompt_tokens"] == sum(plain_counts)


def test_cl100k_token_ids_are_read_as_their_text(causal, mixed_texts):
    """OpenAI's token ids (what LangChain sends) give the text's vectors, prompt and end token included."""
    from rose_embed.compat.tiktoken_ids import load_cl100k

    ckpt, server = causal
    ids = [load_cl100k().encode_ordinary(t) for t in mixed_texts]
    ours, usage = _floats(server, ids, prompt_name="query")
    ref, counts = reference_pooled(ckpt, mixed_texts, prompt=QUERY_PROMPT)
    assert _cosines(ours, ref).min() >= COSINE
    assert usage["prompt_tokens"] == sum(counts)


@pytest.mark.parametrize("body,param", [
    ({"prompt_name": "nope"}, "prompt_name"),
    ({"input_type": "classification"}, "input_type"),
    ({"prompt_name": "query", "input_type": "document"}, "prompt_name"),
    ({"encoding_format": "int8"}, "encoding_format"),
    ({"encoding_format": "base64_binary"}, "encoding_format"),
    ({"dimensions": 20}, "dimensions"),
    ({"dimensions": 65}, "dimensions"),
])
def test_causal_rejects_what_it_cannot_do(causal, body, param):
    _, server = causal
    r = _post(server, input="a", **body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param
    if param == "encoding_format":
        assert "float, base64" in error["message"] and "int8" not in error["message"].split(";")[0]
    if param == "dimensions":
        assert "16, 32, 64" in error["message"]


def test_causal_matches_sentence_transformers(causal, mixed_texts):
    """The model card's own usage: SentenceTransformer(path).encode(texts, prompt_name=...)."""
    from sentence_transformers import SentenceTransformer

    ckpt, server = causal
    model = SentenceTransformer(str(ckpt.path), device="cpu")
    for prompt_name in (None, "query"):
        expected = model.encode(mixed_texts, prompt_name=prompt_name, convert_to_numpy=True).astype(np.float64)
        ours, _ = _floats(server, mixed_texts, **({"prompt_name": prompt_name} if prompt_name else {}))
        assert _cosines(ours, torch.from_numpy(expected)).min() >= COSINE


def test_causal_matryoshka_declared_sizes(causal, mixed_texts):
    _, server = causal
    full, _ = _floats(server, mixed_texts)
    for dims in (16, 32, 64):
        cut, _ = _floats(server, mixed_texts, dimensions=dims)
        expected = full[:, :dims] / np.linalg.norm(full[:, :dims], axis=1, keepdims=True)
        assert cut.shape == (len(mixed_texts), dims)
        np.testing.assert_allclose(cut, expected, atol=1e-6)


def test_bidirectional_matches_reference_not_causal(bidirectional, mixed_texts):
    ckpt, server = bidirectional
    ours, usage = _floats(server, mixed_texts)
    ref, counts = reference_pooled(ckpt, mixed_texts)
    assert _cosines(ours, ref).min() >= COSINE
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)  # float output is unit length
    assert usage["prompt_tokens"] == sum(counts)
    # The same weights with a causal mask give other vectors: the mask really is full.
    causal_ref, _ = reference_pooled(ckpt, mixed_texts[2:], is_causal=True)
    assert _cosines(ours[2:], causal_ref).max() < 0.999
    for text in mixed_texts[:3]:
        single, _ = _floats(server, text)
        assert _cosines(single, reference_pooled(ckpt, [text])[0]).min() >= COSINE


def _int8_reference(ref: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    scaled = (127 * torch.tanh(ref.double())).numpy()
    near = np.abs(scaled - np.floor(scaled) - 0.5) < BOUNDARY
    return np.clip(np.rint(scaled), -128, 127).astype(np.int64), near


def _bits_reference(ref: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    values = ref.double().numpy()
    return (values >= 0).astype(np.int64), np.abs(values) < BOUNDARY


def _unpack(rows) -> np.ndarray:
    return np.unpackbits(np.array(rows, dtype=np.uint8), axis=1).astype(np.int64)


def _agree(ours: np.ndarray, expected: np.ndarray, near: np.ndarray) -> None:
    assert ours.shape == expected.shape
    mismatch = (ours != expected) & ~near
    assert not mismatch.any(), np.argwhere(mismatch)[:5]
    assert (ours[near] - expected[near]).__abs__().max(initial=0) <= 1


@pytest.mark.parametrize("dims", [None, 24])
def test_bidirectional_quantized_formats(bidirectional, mixed_texts, dims):
    ckpt, server = bidirectional
    ref, _ = reference_pooled(ckpt, mixed_texts)
    ref = ref if dims is None else ref[:, :dims]
    width = ref.shape[1]
    int8, int8_near = _int8_reference(ref)
    bits, bits_near = _bits_reference(ref)
    num_bytes = (width + 7) // 8
    extra = {} if dims is None else {"dimensions": dims}

    def get(fmt):
        r = _post(server, input=mixed_texts, encoding_format=fmt, **extra)
        assert r.status_code == 200, r.text
        return [d["embedding"] for d in r.json()["data"]]

    _agree(np.array(get("int8")), int8, int8_near)
    _agree(np.array(get("uint8")) - 128, int8, int8_near)
    decoded = np.array([np.frombuffer(base64.b64decode(s), dtype=np.int8) for s in get("base64_int8")])
    _agree(decoded.astype(np.int64), int8, int8_near)
    ubinary = get("ubinary")
    assert np.array(ubinary).shape == (len(mixed_texts), num_bytes)
    _agree(_unpack(ubinary)[:, :width], bits, bits_near)
    _agree(_unpack(np.array(get("binary")) + 128)[:, :width], bits, bits_near)
    packed = [np.frombuffer(base64.b64decode(s), dtype=np.uint8) for s in get("base64_binary")]
    _agree(_unpack(packed)[:, :width], bits, bits_near)
    assert not _unpack(ubinary)[:, width:].any()  # padding bits are zero


def test_bidirectional_float_formats_and_any_dimensions(bidirectional, mixed_texts):
    ckpt, server = bidirectional
    full, _ = _floats(server, mixed_texts)
    r = _post(server, input=mixed_texts, encoding_format="base64")
    decoded = np.array([np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in r.json()["data"]])
    np.testing.assert_allclose(decoded, full, atol=1e-7)
    # No Matryoshka declaration in this checkpoint: any size up to the full one.
    cut, _ = _floats(server, mixed_texts, dimensions=7)
    np.testing.assert_allclose(cut, full[:, :7] / np.linalg.norm(full[:, :7], axis=1, keepdims=True), atol=1e-6)
    # No prompts: input_type is accepted and changes nothing; prompt_name is not.
    same, _ = _floats(server, mixed_texts, input_type="query")
    np.testing.assert_allclose(same, full, atol=1e-6)
    assert _post(server, input="a", prompt_name="query").status_code == 400
    r = _post(server, input="a", encoding_format="float16")
    assert r.status_code == 400 and "base64_binary" in r.json()["error"]["message"]


def test_bf16_sharded_untied_checkpoint_without_end_token_in_tokenizer(tmp_path, tok, mixed_texts):
    """The server appends the end token itself and loads bf16 shards with an lm_head."""
    ckpt = qwen3_embedding(tmp_path / "bf16", tok, seed=3, bf16=True, sharded=True, tokenizer_appends_end=False)
    server = _serve(ckpt, "--default-prompt-name", "query")
    try:
        ours, usage = _floats(server, mixed_texts)
        ref, counts = reference_pooled(ckpt, mixed_texts, prompt=QUERY_PROMPT)  # the default prompt applies
        assert _cosines(ours, ref).min() >= COSINE
        assert usage["prompt_tokens"] == sum(counts)
        # No declaration and no flag: any dimensions; int8 is not this model's.
        assert _post(server, input="a", dimensions=5).status_code == 200
        assert _post(server, input="a", encoding_format="int8").status_code == 400
    finally:
        server.stop()


def test_flags_override_the_checkpoint(bidirectional, mixed_texts):
    """--attention causal --pooling last on the pplx checkpoint: the causal reference, float only."""
    ckpt, _ = bidirectional
    server = _serve(ckpt, "--attention", "causal", "--pooling", "last", "--embedding-quantization", "none",
                    "--matryoshka-dims", "none")
    try:
        texts = mixed_texts[2:6]
        ours, _ = _floats(server, texts)
        ref, _ = reference_pooled(ckpt, texts, is_causal=True, pooling="last")
        # pplx's tokenizer has no end token post-processor: the server adds <|endoftext|>.
        ids_ref = []
        for text in texts:
            ids = ckpt.tokenizer.encode(text).ids + [ckpt.tokenizer.token_to_id("<|endoftext|>")]
            ids_ref.append(ckpt.reference(input_ids=torch.tensor([ids])).last_hidden_state[0, -1])
        assert _cosines(ours, torch.stack(ids_ref)).min() >= COSINE
        assert _cosines(ours, ref).max() < 0.999
        assert _post(server, input="a", encoding_format="int8").status_code == 400
        assert _post(server, input="a", dimensions=32).status_code == 400
    finally:
        server.stop()


@torch.no_grad()
def _reference_chunked(ckpt, text: str, prompt: str, normalize: bool) -> torch.Tensor:
    """long_inputs chunk by hand on Hugging Face: the text's tokens (no end token, no limit) in
    windows of prompt + tokens + what the served tokenizer appends (<|endoftext|> for
    Qwen3-Embedding, nothing for pplx-embed) filling 256, each pooled (normalised where the model
    normalises), averaged with the text tokens of each window as weights."""
    bare = Tokenizer.from_str(ckpt.tokenizer.to_str())
    bare.no_truncation()
    content = bare.encode(text, add_special_tokens=False).ids
    prompt_ids = bare.encode(prompt, add_special_tokens=False).ids if prompt else []
    end = ckpt.tokenizer.encode("x").ids[len(bare.encode("x", add_special_tokens=False).ids):]
    size = 256 - len(prompt_ids) - len(end)
    vectors, weights = [], []
    for lo in range(0, len(content), size):
        ids = prompt_ids + content[lo: lo + size] + end
        mask = None if ckpt.is_causal else torch.zeros(1, 1, len(ids), len(ids))
        hidden = ckpt.reference(input_ids=torch.tensor([ids]), attention_mask=mask).last_hidden_state[0].double()
        vector = hidden[-1] if ckpt.pooling == "last" else hidden.mean(0)
        vectors.append(vector / vector.norm() if normalize else vector)
        weights.append(len(ids) - len(prompt_ids) - len(end))
    assert len(vectors) >= 3  # the text is what the test needs
    weights = torch.tensor(weights, dtype=torch.float64)
    return (torch.stack(vectors) * weights[:, None]).sum(0, keepdim=True) / weights.sum()


def test_causal_chunks_long_texts_window_by_window(causal, corpus):
    """Each window is prompt + text tokens + the end token; last-token pooling reads each window's end."""
    ckpt, server = causal
    document = " ".join(corpus[:40])
    ours, usage = _floats(server, [document, "x"], prompt_name="query", long_inputs="chunk")
    reference = _reference_chunked(ckpt, document, QUERY_PROMPT, normalize=True)
    assert _cosines(ours[:1], reference).min() >= COSINE
    truncated, _ = reference_pooled(ckpt, [document], prompt=QUERY_PROMPT)
    assert _cosines(ours[:1], truncated).max() < 0.999
    assert usage["prompt_tokens"] > 3 * 256


def test_bidirectional_chunks_quantise_the_raw_weighted_mean(bidirectional, corpus):
    ckpt, server = bidirectional
    document = " ".join(corpus[:40])
    reference = _reference_chunked(ckpt, document, "", normalize=False)
    ours, _ = _floats(server, [document], long_inputs="chunk")
    assert _cosines(ours, reference).min() >= COSINE
    r = _post(server, input=[document], long_inputs="chunk", encoding_format="int8")
    int8, near = _int8_reference(reference.float())
    _agree(np.array([d["embedding"] for d in r.json()["data"]]), int8, near)
