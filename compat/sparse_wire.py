"""A sparse vector's (index, value) pairs -> JSON, its values float32-exact.

As compat/vector_wire.py writes dense vectors: orjson formats each float32 value as the shortest
decimal that reads back as the same float32 (TEI's own writing), with no Python float per value;
msgspec copies each text's fragment into the body as it is.
"""

from __future__ import annotations

import msgspec
import numpy as np
import orjson

from rose_embed.compat.openai import SparseEmbedding

_NUMPY = orjson.OPT_SERIALIZE_NUMPY


def tei_pairs(indices: np.ndarray, values: np.ndarray, tokens: list[str] | None = None) -> msgspec.Raw:
    """TEI's answer for one text: [{"index", "value"(, "text")}, ...], in the order given."""
    if tokens is None:
        pairs = [{"index": i, "value": v} for i, v in zip(indices.tolist(), values)]
    else:
        pairs = [{"index": i, "value": v, "text": t} for i, v, t in zip(indices.tolist(), values, tokens)]
    return msgspec.Raw(orjson.dumps(pairs, option=_NUMPY))


def sparse_embedding(indices: np.ndarray, values: np.ndarray, tokens: list[str] | None = None) -> SparseEmbedding:
    """/v1/embeddings' extension for one text: {"indices": [...], "values": [...](, "tokens": [...])}."""
    return SparseEmbedding(indices=msgspec.Raw(orjson.dumps(indices.astype(np.int64), option=_NUMPY)),
                           values=msgspec.Raw(orjson.dumps(values.astype(np.float32), option=_NUMPY)),
                           tokens=tokens)
