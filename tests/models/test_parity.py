"""The server's vectors equal sentence-transformers' on the real default model (fp32, CPU), and the
default dtype (bf16 on a CPU that computes it natively) stays within its stated tolerance."""

from __future__ import annotations

import base64

import httpx
import numpy as np
import pytest

pytestmark = pytest.mark.slow  # vectors against sentence-transformers on the real model

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
MIN_COSINE = 0.99999


@pytest.fixture(scope="module")
def parity_texts(texts) -> list[str]:
    # 520 paragraphs as they are, plus 40 documents of 16 paragraphs: mostly past 256 tokens.
    long_docs = ["\n\n".join(texts[i : i + 16]) for i in range(600, 1240, 16)]
    return texts[:520] + long_docs


@pytest.fixture(scope="module")
def reference(default_engine, parity_texts) -> np.ndarray:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(default_engine.spec.path), device="cpu")
    return model.encode(parity_texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)


def test_long_texts_are_truncated_to_the_model_limit(default_engine, parity_texts):
    lengths = [len(ids) for ids in default_engine.tokenize(parity_texts[-40:])]
    assert max(lengths) == default_engine.spec.max_seq_len == 256
    assert sum(n == 256 for n in lengths) >= 30  # most long documents really were cut


def test_server_matches_sentence_transformers(server, parity_texts, reference):
    vectors = []
    with httpx.Client(timeout=120) as client:
        for lo in range(0, len(parity_texts), 100):
            r = client.post(server.url + "/v1/embeddings",
                            json={"input": parity_texts[lo : lo + 100], "model": MODEL, "encoding_format": "base64"})
            assert r.status_code == 200, r.text
            vectors += [np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in r.json()["data"]]
    ours = np.stack(vectors)
    assert ours.shape == reference.shape
    cosine = (ours * reference).sum(1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(reference, axis=1))
    assert cosine.min() >= MIN_COSINE, f"worst cosine {cosine.min()} at text {cosine.argmin()}"
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)


def test_usage_counts_embedded_tokens(server, default_engine, parity_texts):
    sample = parity_texts[-5:]
    r = httpx.post(server.url + "/v1/embeddings", json={"input": sample, "model": MODEL}, timeout=60)
    usage = r.json()["usage"]
    expected = sum(len(ids) for ids in default_engine.tokenize(sample))  # after truncation
    assert usage == {"prompt_tokens": expected, "total_tokens": expected}


def test_default_dtype_stays_within_its_tolerance_of_sentence_transformers(parity_texts, reference):
    """Default flags on this CPU: bf16 where it computes bf16 natively (engine/rose/cpu_features.py),
    every vector within cosine 0.9999 of sentence-transformers' float32 ones; float32 elsewhere."""
    import torch

    from rose_embed.engine.contract.config import EngineConfig
    from rose_embed.engine.rose.cpu_features import native_bf16
    from rose_embed.engine.rose.engine import Engine

    engine = Engine(EngineConfig(max_batch_tokens=4096))
    assert engine.dtype == (torch.bfloat16 if native_bf16() else torch.float32)
    ours = np.asarray(engine.embed(parity_texts), dtype=np.float64)
    cosine = (ours * reference).sum(1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(reference, axis=1))
    assert cosine.min() >= 0.9999, f"worst cosine {cosine.min()} at text {cosine.argmin()}"
