"""What one text's answer weighs, per head and wire format, written by the server's own encoders
(compat/): the bytes a response body holds per text, and the bytes of its row on the device-to-host
copy (every head's rows are float32, engine/contract/sparse_rows.py for the sparse ones).

  dense       /v1/embeddings item, encoding_format float and base64
  sparse      /v1/embeddings item ({"indices", "values"}) and TEI's /embed_sparse pairs
  classifier  /classify item (probabilities) and TEI's /predict labels with scores
"""

from __future__ import annotations

import msgspec
import numpy as np
from rose_embed.compat.classify import ClassificationData, Prediction
from rose_embed.compat.openai import Embedding
from rose_embed.compat.sparse_wire import sparse_embedding, tei_pairs
from rose_embed.compat.vector_wire import base64_fragments, float_fragments
from rose_embed.engine.contract.sparse_rows import read_rows

_encode = msgspec.json.encode


def _mean_bytes(items) -> float:
    sizes = [len(_encode(item)) for item in items]
    return float(np.mean(sizes)) if sizes else 0.0


def answer_bytes(head: str, rows: np.ndarray) -> dict[str, float]:
    """format -> mean bytes per text over `rows` (the engine's answers), "device->host" included."""
    out = {"device->host": float(rows.shape[1] * rows.itemsize)}
    if head == "dense":
        out["JSON float"] = _mean_bytes(Embedding(index=i, embedding=v) for i, v in enumerate(float_fragments(rows)))
        out["JSON base64"] = _mean_bytes(Embedding(index=i, embedding=v) for i, v in enumerate(base64_fragments(rows)))
    elif head == "sparse":
        pairs = read_rows(rows)
        out["JSON indices+values"] = _mean_bytes(
            Embedding(index=i, embedding=sparse_embedding(p.indices, p.values), object="sparse_embedding")
            for i, p in enumerate(pairs))
        out["JSON pairs (TEI)"] = _mean_bytes(tei_pairs(p.indices, p.values) for p in pairs)
    else:
        num_labels = rows.shape[1] // 2
        probs = rows[:, :num_labels]
        labels = [f"label_{j}" for j in range(num_labels)]
        out["JSON /classify"] = _mean_bytes(
            ClassificationData(index=i, label=labels[int(p.argmax())], probs=p.tolist(), num_classes=num_labels)
            for i, p in enumerate(probs))
        out["JSON /predict (TEI)"] = _mean_bytes(
            [Prediction(score=float(s), label=labels[j]) for j, s in enumerate(p)] for p in probs)
    return out


def active_dims(rows: np.ndarray) -> tuple[float, int]:
    """A sparse head's (mean, largest) count of non-zero values per text: each row's first float."""
    counts = rows[:, 0]
    return float(counts.mean()), int(counts.max())
