"""Helpers of the corpus tests: test corpora from the shared workload, the server's vectors."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import httpx
import numpy as np

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
MIN_COSINE = 0.99999


def corpus_rows(texts: list[str], num_short: int, num_long: int) -> list[dict]:
    """Paragraphs of the shared workload plus documents of 16 paragraphs (past the model's
    256-token limit, so truncation is covered), each with a string id."""
    long_docs = ["\n\n".join(texts[i : i + 16]) for i in range(1000, 1000 + 16 * num_long, 16)]
    return [{"id": f"doc-{i}", "text": t} for i, t in enumerate(texts[:num_short] + long_docs)]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def server_vectors(url: str, texts: list[str]) -> np.ndarray:
    vectors = []
    with httpx.Client(timeout=120) as client:
        for lo in range(0, len(texts), 100):
            r = client.post(url + "/v1/embeddings",
                            json={"input": texts[lo : lo + 100], "model": MODEL, "encoding_format": "base64"})
            assert r.status_code == 200, r.text
            vectors += [np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in r.json()["data"]]
    return np.stack(vectors)


def assert_same_vectors(ours: np.ndarray, reference: np.ndarray) -> None:
    assert ours.shape == reference.shape
    cosine = (ours * reference).sum(1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(reference, axis=1))
    assert cosine.min() >= MIN_COSINE, f"worst cosine {cosine.min()} at row {cosine.argmin()}"


def read_parquet_output(path: Path, id_field: str = "id") -> tuple[list, np.ndarray]:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    embedding = table.column("embedding").combine_chunks()
    vectors = embedding.values.to_numpy().reshape(len(table), embedding.type.list_size)
    return table.column(id_field).to_pylist(), vectors
