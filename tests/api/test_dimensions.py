"""OpenAI's `dimensions` on the wire (fake engine, in process): a prefix of the vector, re-normalised;
any size up to the full one, unless the model declares its Matryoshka sizes."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from tests.support.fake_engine import FakeEngine, serve
from tests.support.helpers import assert_envelope

DIM = 64
TEXTS = ["matryoshka", "a second, longer text about nested sizes", ""]


@pytest.fixture(scope="module")
def fake() -> FakeEngine:
    return FakeEngine(dim=DIM)


@pytest.fixture(scope="module")
def declared():
    """A model whose config.json declares matryoshka_dimensions [16, 32]."""
    fake = FakeEngine(dim=DIM, matryoshka_dims=(16, 32))
    with serve(fake) as client:
        yield fake, client


def _post(client, dimensions, encoding_format="float"):
    return client.post("/v1/embeddings", json={"input": TEXTS, "dimensions": dimensions,
                                               "encoding_format": encoding_format})


def _vectors(response) -> np.ndarray:
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    if isinstance(data[0]["embedding"], str):
        return np.stack([np.frombuffer(base64.b64decode(d["embedding"]), "<f4") for d in data])
    return np.array([d["embedding"] for d in data], np.float32)


def _prefix(fake: FakeEngine, dimensions: int) -> np.ndarray:
    cut = fake.embed(TEXTS)[:, :dimensions]
    return cut / np.linalg.norm(cut, axis=1, keepdims=True)


@pytest.mark.parametrize("encoding_format", ["float", "base64"])
@pytest.mark.parametrize("dimensions", [1, 7, 32, DIM - 1, DIM])
def test_any_size_is_a_renormalised_prefix(client, fake, dimensions, encoding_format):
    got = _vectors(_post(client, dimensions, encoding_format))
    assert got.shape == (len(TEXTS), dimensions)
    np.testing.assert_allclose(got, _prefix(fake, dimensions), atol=1e-6, rtol=0)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)


@pytest.mark.parametrize("dimensions", [0, -3, DIM + 1])
def test_sizes_out_of_range_are_400s(client, dimensions):
    error = assert_envelope(_post(client, dimensions), 400)
    assert error["param"] == "dimensions" and f"between 1 and {DIM}" in error["message"]


def test_declared_matryoshka_sizes_only(declared):
    fake, client = declared
    for dimensions in (16, 32, DIM):
        np.testing.assert_allclose(_vectors(_post(client, dimensions)), _prefix(fake, dimensions), atol=1e-6, rtol=0)
    error = assert_envelope(_post(client, 20), 400)
    assert error["param"] == "dimensions" and "16, 32, 64" in error["message"]
