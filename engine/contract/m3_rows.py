"""A BGE-M3 model's answer rows, and how a text's rows become its dense, sparse and multi-vector outputs.

Every pooling segment of a BGE-M3 batch gives one float32 row (engine/rose/layers/m3_head.py), from the
state of the segment's first token:

    [ dense: normalize(state) (H) | colbert: normalize(colbert_linear(state)) (D) | relu(sparse_linear(state)) (1) ]

A text asked for its dense vector alone is one segment, so its one row's first H floats are the CLS
token's normalised state. A text asked for its sparse or multi-vector output is laid out with every
token a segment of its own (`token_segments`), so its rows are its tokens' in order: the first row's
dense part is the dense vector, the later rows' colbert parts are the token vectors FlagEmbedding keeps
(every token after the first), and the last column holds each token's lexical weight, which
`lexical_weights` reduces per token id on the host (a text's distinct ids are at most its tokens, so
nothing vocabulary-wide is ever formed or copied).
"""

from __future__ import annotations

import numpy as np


def row_width(dense_dim: int, colbert_dim: int) -> int:
    return dense_dim + colbert_dim + 1


def token_segments(seq: np.ndarray) -> np.ndarray:
    """A sequence's segment ids with every token a segment of its own."""
    return np.arange(len(seq), dtype=np.int32)


def dense_vectors(rows: np.ndarray, dense_dim: int) -> np.ndarray:
    """[n, dense_dim]: the dense part of rows (one per text, or each text's first)."""
    return rows[:, :dense_dim]


def colbert_vectors(text_rows: np.ndarray, dense_dim: int, colbert_dim: int) -> np.ndarray:
    """[tokens - 1, colbert_dim]: a text's token vectors, its first token's left out as FlagEmbedding leaves it."""
    return text_rows[1:, dense_dim:dense_dim + colbert_dim]


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
