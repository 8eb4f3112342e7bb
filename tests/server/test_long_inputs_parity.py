"""`long_inputs: chunk` on the real default model equals Hugging Face transformers window by window
(fp32, CPU), through the server and through the corpus CLI."""

from __future__ import annotations

import base64
import json

import httpx
import numpy as np
import pytest

from rose_embed.server.cli.main import main

pytestmark = pytest.mark.slow  # the real model, a server process and transformers

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
MIN_COSINE = 0.9999


@pytest.fixture(scope="module")
def documents(texts) -> list[str]:
    """About 3x and 5x the model's 256 tokens, and a short text between them."""
    return ["\n\n".join(texts[100:119]), "a short text between two long ones", "\n\n".join(texts[300:333])]


def hf_chunked(model_dir, texts: list[str]) -> np.ndarray:
    """tests/support/chunk_reference.py's cookbook method on transformers, windows of max_length - 2,
    each embedded as the model's sentence-transformers modules say: mean pooling, normalised."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    from tests.support.chunk_reference import window_by_window

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir, dtype=torch.float32).eval()

    def window_vector(ids: torch.Tensor) -> np.ndarray:
        with torch.no_grad():
            states = model(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state[0]
        vector = states.mean(0).double().numpy()
        return vector / np.linalg.norm(vector)

    return window_by_window(tokenizer, texts, 256 - 2, window_vector)


def cosines(ours: np.ndarray, reference: np.ndarray) -> np.ndarray:
    return (ours * reference).sum(1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(reference, axis=1))


def chunked_by_server(url: str, texts: list[str]) -> tuple[np.ndarray, dict]:
    r = httpx.post(url + "/v1/embeddings", timeout=120,
                   json={"input": texts, "model": MODEL, "encoding_format": "base64", "long_inputs": "chunk"})
    assert r.status_code == 200, r.text
    vectors = [np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in r.json()["data"]]
    return np.stack(vectors), r.json()["usage"]


def test_server_chunks_as_transformers_does(server, default_engine, documents):
    ours, usage = chunked_by_server(server.url, documents)
    reference = hf_chunked(default_engine.spec.path, documents)
    assert cosines(ours, reference).min() >= MIN_COSINE, cosines(ours, reference)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    # Not the truncated vector: the windows after the first changed it.
    truncated = default_engine.embed(documents[:1])[0]
    assert float(ours[0] @ truncated) < 0.99
    # usage counts every window's tokens: [CLS] + window + [SEP] each.
    content = [len(ids) - 2 for ids in default_engine.tokenizer.encode_untruncated(documents)]
    assert content[0] > 2 * 254 and content[2] > 4 * 254  # what the documents are for
    windows = [-(-n // 254) for n in content]
    assert usage["prompt_tokens"] == sum(content) + 2 * sum(windows)


def test_corpus_cli_chunks_as_the_server_does(server, tmp_path, documents):
    source = tmp_path / "docs.jsonl"
    source.write_text("".join(json.dumps({"text": t}) + "\n" for t in documents), encoding="utf-8")
    output = tmp_path / "vectors.npy"
    main(["embed", str(source), "-o", str(output), "--dtype", "float32", "--long-inputs", "chunk", "--chunk-size", "2",
          "--quiet"])
    ours, _ = chunked_by_server(server.url, documents)
    assert cosines(np.load(output), ours).min() >= 0.99999
