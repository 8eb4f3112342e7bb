"""The response encoders: float32-exact shortest decimals, and base64 bytes equal to the simple encoder's."""

from __future__ import annotations

import base64
import json

import msgspec
import numpy as np
import pytest
from rose_embed.compat.encoding import encode_vector
from rose_embed.compat.openai import Embedding, EmbeddingResponse, Usage
from rose_embed.compat.vector_wire import base64_fragments, encode_vectors, float_fragments
from tests.support.fake_engine import FakeEngine, serve


def _unit_vectors(n: int, dim: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    v = rng.standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _random_float32(n: int, seed: int = 1) -> np.ndarray:
    """Finite float32 values from uniformly random bit patterns: every exponent, denormals too."""
    bits = np.random.default_rng(seed).integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    values = bits.view(np.float32)
    return values[np.isfinite(values)]


def _body(rows: list) -> bytes:
    response = EmbeddingResponse(data=[Embedding(index=i, embedding=e) for i, e in enumerate(rows)],
                                 model="m", usage=Usage(prompt_tokens=1, total_tokens=1))
    return msgspec.json.encode(response)


def _shortest_float32(value: np.float32) -> float:
    """The reference: numpy's shortest decimal that reads back as this float32 (Dragon4), as a number."""
    return float(np.format_float_scientific(value, unique=True))


def test_float_text_is_the_shortest_decimal_of_each_float32():
    vectors = _unit_vectors(64, 384)
    vectors[0, :4] = [0.0, -0.0, 1.0, 1e-30]  # zeros, an integral value, a tiny exponent
    decoded = json.loads(_body(float_fragments(vectors)))["data"]
    texts = [d["embedding"] for d in decoded]
    expected = [[_shortest_float32(x) for x in row] for row in vectors]
    assert texts == expected  # the same decimal numbers, compared as Python floats
    # Shorter than the float64 widening's digits: what the wire saves.
    wide = msgspec.json.encode(vectors.astype(np.float64).tolist())
    assert len(_body(float_fragments(vectors))) < 0.75 * len(wide)


def test_float_text_round_trips_every_float32_exactly():
    values = _random_float32(200_000)[:100_000].reshape(1000, 100)
    values[0, :3] = [np.finfo(np.float32).max, np.finfo(np.float32).smallest_subnormal, -3e20]
    decoded = json.loads(_body(float_fragments(values)))["data"]
    got = np.array([d["embedding"] for d in decoded], dtype=np.float64).astype(np.float32)
    assert np.array_equal(got.view(np.uint32), values.view(np.uint32))
    sample = values[::97, ::13]
    got_sample = np.array([d["embedding"] for d in decoded], dtype=np.float64)[::97, ::13]
    assert got_sample.tolist() == [[_shortest_float32(x) for x in row] for row in sample]


def test_base64_body_is_byte_identical_to_the_simple_encoder():
    # Rows of a width divisible by 3 are encoded as one array and cut; others row by row (padding).
    for dim in (384, 768, 3, 1024, 1):
        vectors = _unit_vectors(33, dim, seed=dim)
        assert _body(base64_fragments(vectors)) == _body([encode_vector(v, "base64") for v in vectors])
    assert base64_fragments(np.zeros((0, 768), np.float32)) == []


def test_base64_decodes_to_the_same_bytes_from_a_strided_array():
    vectors = _unit_vectors(8, 512)[:, ::2]  # not contiguous: a truncated or sliced view
    for row, fragment in zip(vectors, base64_fragments(vectors)):
        assert base64.b64decode(json.loads(bytes(fragment))) == row.astype("<f4").tobytes()


def test_other_formats_are_refused():
    # Quantised formats go through compat.encoding; the whole-array encoders are float/base64 only.
    with pytest.raises(ValueError, match="some-format"):
        encode_vectors(_unit_vectors(3, 4), "some-format")


def test_server_answers_float_and_base64_with_the_same_float32_values():
    fake = FakeEngine(dim=384)
    texts = ["a short query", "def f(x): return x", "Return the number of items in the container."]
    with serve(fake) as client:
        as_float = client.post("/v1/embeddings", json={"input": texts, "encoding_format": "float"})
        as_base64 = client.post("/v1/embeddings", json={"input": texts, "encoding_format": "base64"})
    assert as_float.status_code == as_base64.status_code == 200
    floats = np.array([d["embedding"] for d in as_float.json()["data"]], dtype=np.float64)
    b64 = np.stack([np.frombuffer(base64.b64decode(d["embedding"]), "<f4") for d in as_base64.json()["data"]])
    # The wire must not change a bit of the engine's float32 values, in either format.
    expected = fake.embed(texts)
    assert np.array_equal(b64, expected)
    assert np.array_equal(floats.astype(np.float32), expected)
