"""A BGE-M3 model's answer rows, and how a text's rows become its dense, sparse and multi-vector outputs.

Every pooling segment of a BGE-M3 batch gives one float32 row (engine/rose/layers/m3_head.py), from the
state of the segment's first token, max(H, D) + 1 floats wide:

    a text's first token:  [ dense: normalize(state) (H)                    | zeros | relu(sparse_linear(state)) ]
    every later token:     [ colbert: normalize(colbert_linear(state)) (D)  | zeros | relu(sparse_linear(state)) ]

A "first token" is a text's first (position 0), not a segment's. Only those parts are ever read: the
dense vector is the first token's (CLS) state, and FlagEmbedding's token vectors are every token's after
the first. So a row holds one of the two vectors, not both: about half the floats of both where H = D,
as in BGE-M3, on every copy to the host and in the arena. The lexical weight stays in the last column of
every row, the first token's included: FlagEmbedding leaves that token's weight out only as the weight
of an unused id (the cls token), so a tokenizer that begins a text with another token keeps it.

A text asked for its dense vector alone is one segment, so its one row is a first token's: its first H
floats are the CLS token's normalised state. A text asked for its sparse or multi-vector output is laid
out with every token a segment of its own (`token_segments`), so its rows are its tokens' in order: the
first row's vector is the dense one, the later rows' the token vectors, and the last column holds each
token's lexical weight, which `lexical_weights` reduces per token id on the host (a text's distinct ids
are at most its tokens, so nothing vocabulary-wide is ever formed or copied).
"""

from __future__ import annotations

import numpy as np


def row_width(dense_dim: int, colbert_dim: int) -> int:
    """Floats per row: the wider of the two vectors, and the lexical weight."""
    return max(dense_dim, colbert_dim) + 1


def token_segments(seq: np.ndarray) -> np.ndarray:
    """A sequence's segment ids with every token a segment of its own."""
    return np.arange(len(seq), dtype=np.int32)


def dense_vectors(rows: np.ndarray, dense_dim: int) -> np.ndarray:
    """[n, dense_dim]: the dense vectors of first-token rows (one per text, or each text's first)."""
    return rows[:, :dense_dim]


def colbert_vectors(text_rows: np.ndarray, colbert_dim: int) -> np.ndarray:
    """[tokens - 1, colbert_dim]: a text's token vectors, its first token's left out as FlagEmbedding leaves it
    (that row holds the dense vector)."""
    return text_rows[1:, :colbert_dim]


def lexical_weights(ids: np.ndarray, text_rows: np.ndarray,
                    unused_ids: frozenset[int]) -> tuple[np.ndarray, np.ndarray]:
    """(token ids ascending int64, their weights float32): each id's largest positive weight among its
    tokens, the unused ids (cls, eos, pad, unk) left out, as M3Embedder's _process_token_weights keeps them."""
    weights = text_rows[:, -1]
    ids = np.asarray(ids, dtype=np.int64)
    keep = weights > 0
    if unused_ids:
        keep &= ~np.isin(ids, np.fromiter(unused_ids, dtype=np.int64))
    ids, weights = ids[keep], weights[keep]
    if len(ids) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    order = np.argsort(ids, kind="stable")
    ids, weights = ids[order], weights[order]
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    return ids[starts], np.maximum.reduceat(weights, starts).astype(np.float32)
