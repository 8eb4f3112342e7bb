"""Quantised output formats against a plain-Python restatement of pplx-embed's quantizer,
as functions and on the wire."""

from __future__ import annotations

import base64
import json
import math

import msgspec
import numpy as np
import pytest

from rose_embed.compat.encoding import QUANTIZED_FORMATS, encode_embeddings, encoding_formats
from rose_embed.compat.quantize import int8_tanh, packed_sign_bits
from tests.support.fake_engine import FakeEngine, serve


def _int8(x: float) -> int:
    v = 127 * math.tanh(x)
    r = math.floor(v + 0.5)
    if v + 0.5 == r and r % 2:  # numpy / torch round half to even
        r -= 1
    return max(-128, min(127, r))


def _bytes_of_bits(row) -> list[int]:
    bits = [1 if x >= 0 else 0 for x in row] + [0] * (-len(row) % 8)
    return [sum(b << (7 - j) for j, b in enumerate(bits[i:i + 8])) for i in range(0, len(bits), 8)]


@pytest.fixture
def vectors() -> np.ndarray:
    rng = np.random.default_rng(3)
    v = rng.normal(0, 1.5, (5, 21)).astype(np.float32)
    v[0, :4] = [0.0, -0.0, 40.0, -40.0]  # the sign of zero, saturation
    return v


def test_int8_and_bits_match_the_plain_definition(vectors):
    assert int8_tanh(vectors).tolist() == [[_int8(float(x)) for x in row] for row in vectors]
    assert packed_sign_bits(vectors).tolist() == [_bytes_of_bits(row) for row in vectors]
    assert int8_tanh(vectors)[0, 2:4].tolist() == [127, -127]


def test_wire_formats(vectors):
    int8 = [[_int8(float(x)) for x in row] for row in vectors]
    packed = [_bytes_of_bits(row) for row in vectors]
    assert encode_embeddings(vectors, "int8", None, False) == int8
    assert encode_embeddings(vectors, "uint8", None, False) == [[v + 128 for v in row] for row in int8]
    assert encode_embeddings(vectors, "ubinary", None, False) == packed
    assert encode_embeddings(vectors, "binary", None, False) == [[v - 128 for v in row] for row in packed]
    assert [list(np.frombuffer(base64.b64decode(s), np.int8)) for s in
            encode_embeddings(vectors, "base64_int8", None, False)] == int8
    assert [list(base64.b64decode(s)) for s in encode_embeddings(vectors, "base64_binary", None, False)] == packed


def _decoded(values: list) -> np.ndarray:
    """Float formats leave as pre-encoded JSON fragments (msgspec.Raw); read them back."""
    return np.array([json.loads(bytes(v)) if isinstance(v, msgspec.Raw) else v for v in values])


def test_matryoshka_cuts_before_quantising_and_renormalises_floats(vectors):
    cut = encode_embeddings(vectors, "int8", 9, False)
    assert cut == [[_int8(float(x)) for x in row[:9]] for row in vectors]
    assert encode_embeddings(vectors, "ubinary", 9, False) == [_bytes_of_bits(row[:9]) for row in vectors]
    floats = _decoded(encode_embeddings(vectors, "float", 9, False))
    np.testing.assert_allclose(floats, vectors[:, :9] / np.linalg.norm(vectors[:, :9], axis=1, keepdims=True),
                               rtol=1e-6)
    full = _decoded(encode_embeddings(vectors, "float", None, False))
    np.testing.assert_allclose(np.linalg.norm(full, axis=1), 1.0, rtol=1e-6)  # raw vectors leave unit length


def test_formats_per_model():
    assert encoding_formats(None) == ("float", "base64")
    assert encoding_formats("tanh") == ("float", "base64", *QUANTIZED_FORMATS)


# ---- on the wire: a quantising model (fake engine, in process) ---------------------------------------

DIM = 60  # not a multiple of 8: the last byte of the sign bits is padded


@pytest.fixture(scope="module")
def quantizing() -> FakeEngine:
    return FakeEngine(dim=DIM, quantizing=True)


@pytest.fixture(scope="module")
def client(quantizing):
    with serve(quantizing) as client:
        yield client


TEXTS = ["int8 on the wire", "binary too", "x"]


def _embeddings(client, encoding_format: str, dimensions: int | None = None) -> list:
    body = {"input": TEXTS, "encoding_format": encoding_format}
    if dimensions is not None:
        body["dimensions"] = dimensions
    r = client.post("/v1/embeddings", json=body)
    assert r.status_code == 200, r.text
    assert [d["index"] for d in r.json()["data"]] == list(range(len(TEXTS)))
    return [d["embedding"] for d in r.json()["data"]]


@pytest.mark.parametrize("dimensions", [None, 9, 32])
def test_every_quantised_format_on_the_wire(client, quantizing, dimensions):
    raw = quantizing.embed(TEXTS)[:, :dimensions]  # the model's raw pooled vectors: not unit length
    assert np.abs(raw).max() > 1  # the scale int8 reads is really there
    int8 = [[_int8(float(x)) for x in row] for row in raw]
    packed = [_bytes_of_bits(row) for row in raw]
    assert _embeddings(client, "int8", dimensions) == int8
    assert _embeddings(client, "uint8", dimensions) == [[v + 128 for v in row] for row in int8]
    assert _embeddings(client, "ubinary", dimensions) == packed
    assert _embeddings(client, "binary", dimensions) == [[v - 128 for v in row] for row in packed]
    assert [list(np.frombuffer(base64.b64decode(s), np.int8)) for s in
            _embeddings(client, "base64_int8", dimensions)] == int8
    assert [list(base64.b64decode(s)) for s in _embeddings(client, "base64_binary", dimensions)] == packed


@pytest.mark.parametrize("dimensions", [None, 9])
def test_float_formats_of_a_quantising_model_leave_unit_length(client, quantizing, dimensions):
    raw = quantizing.embed(TEXTS)[:, :dimensions]
    unit = raw / np.linalg.norm(raw, axis=1, keepdims=True)
    np.testing.assert_allclose(_embeddings(client, "float", dimensions), unit, atol=1e-6, rtol=0)
    b64 = np.stack([np.frombuffer(base64.b64decode(s), "<f4") for s in _embeddings(client, "base64", dimensions)])
    np.testing.assert_allclose(b64, unit, atol=1e-6, rtol=0)
