"""What one text's answer weighs, per head and wire format, written by the server's own encoders
(compat/): the bytes a response body holds per text, and the bytes of its row on the device-to-host
copy (every head's rows are float32, engine/contract/sparse_rows.py for the sparse ones).

  dense       /v1/embeddings item, encoding_format float and base64
  sparse      /v1/embeddings item ({"indices", "values"}) and TEI's /embed_sparse pairs
  classifier  /classify item (probabilities) and TEI's /predict labels with scores
  colbert     /v1/embeddings item (multi_vector_embedding: a document's token vectors), float and base64;
              a query's too (query_length vectors, whatever its length)
  bge-m3      /v1/embeddings item, float and base64: the dense vector alone (no `outputs`), and the
              multi_output_embedding of all three outputs; each text's device-to-host rows are max(H, D) + 1
              floats (engine/contract/m3_rows.py), one for the dense vector alone, one per token for all three
"""

from __future__ import annotations

import msgspec
import numpy as np
from rose_embed.compat.classify import ClassificationData, Prediction
from rose_embed.compat.multi_output_wire import multi_output_item
from rose_embed.compat.multi_vector_wire import multi_vector
from rose_embed.compat.openai import Embedding
from rose_embed.compat.sparse_wire import sparse_embedding, tei_pairs
from rose_embed.compat.vector_wire import base64_fragments, float_fragments
from rose_embed.engine.contract import m3_rows
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


def multi_vector_bytes(texts_rows: list[np.ndarray]) -> dict[str, float]:
    """format -> mean bytes per text of a ColBERT model's answers, each text's token vectors [n, D]."""
    out = {"device->host": float(np.mean([rows.nbytes for rows in texts_rows]))}
    for name in ("float", "base64"):
        out[f"JSON {name}"] = _mean_bytes(Embedding(index=i, embedding=multi_vector(rows, name),
                                                    object="multi_vector_embedding")
                                          for i, rows in enumerate(texts_rows))
    return out


def m3_bytes(seqs: list[np.ndarray], texts_rows: list[np.ndarray], dense_dim: int, colbert_dim: int,
             unused_ids: frozenset[int]) -> dict[str, float]:
    """format -> mean bytes per text of a BGE-M3 answer with all three outputs, from each text's rows (one per
    token) and ids, written as server/pipeline/m3_ask.py writes them."""
    out = {"device->host": float(np.mean([rows.nbytes for rows in texts_rows]))}
    first = np.stack([rows[0] for rows in texts_rows])
    dense = m3_rows.dense_vectors(first, dense_dim)
    for name, fragments in (("float", float_fragments(dense)), ("base64", base64_fragments(dense))):
        out[f"JSON {name}"] = _mean_bytes(multi_output_item(i, {
            "dense": fragments[i],
            "sparse": sparse_embedding(*m3_rows.lexical_weights(seq, rows, unused_ids)),
            "colbert": multi_vector(m3_rows.colbert_vectors(rows, colbert_dim), name)})
            for i, (seq, rows) in enumerate(zip(seqs, texts_rows)))
    return out


def m3_dense_bytes(rows: np.ndarray, dense_dim: int) -> dict[str, float]:
    """format -> mean bytes per text of a BGE-M3 answer without `outputs`: the dense vector, in OpenAI's item; its
    row on the device-to-host copy holds the other outputs' parts too."""
    out = answer_bytes("dense", m3_rows.dense_vectors(rows, dense_dim))
    out["device->host"] = float(rows.shape[1] * rows.itemsize)
    return out


def active_dims(rows: np.ndarray) -> tuple[float, int]:
    """A sparse head's (mean, largest) count of non-zero values per text: each row's first float."""
    counts = rows[:, 0]
    return float(counts.mean()), int(counts.max())
