"""A sparse encoder's answer rows: each text's (index, value) pairs in a float32 row of fixed width.

Every result crosses from an engine to a front end as rows of one width per model (the arena,
engine/contract/arena.py, and LazyResult's one device-to-host copy), while the number of non-zero
values of a sparse vector varies from text to text. So the engine (engine/rose/layers/sparse_head.py)
writes each text's row, on the device and inside the model's graph, as

    [ count | index_0 ... index_{K-1} | value_0 ... value_{K-1} ]        1 + 2K floats

count     the text's non-zero values over the whole vocabulary, counted before anything is cut
index_j   the token id of its j-th pair (a float32: exact below 2**24)
value_j   that id's value; zeros after the last non-zero

With the model's top-k the pairs are its K largest values in descending order; without one, its
first K non-zeros in ascending id order (engine/rose/layers/sparse_head.py: no sort on the device).

K is the model's `num_slots` (engine/model_files/sparse.py): its top-k where it has one, else a cap
that its texts stay far below. The front end reads a row into the text's pairs, in ascending
index order, and can tell a text whose non-zeros did not all fit (count > K) from one whose
top-k was meant to cut it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def row_width(num_slots: int) -> int:
    """The floats of one row holding `num_slots` (index, value) pairs."""
    return 1 + 2 * num_slots


def num_slots_of(width: int) -> int:
    return (width - 1) // 2


@dataclass(frozen=True)
class SparseRow:
    """One text's sparse vector as its row carries it."""

    indices: np.ndarray  # int64 [n], ascending
    values: np.ndarray  # float32 [n], > 0
    num_active: int  # the text's non-zero values before any cut (>= n)

    @property
    def is_cut(self) -> bool:
        """Some of the text's non-zero values did not fit in its row."""
        return self.num_active > len(self.indices)


def read_rows(rows: np.ndarray) -> list[SparseRow]:
    """rows [N, 1 + 2K] -> each text's pairs."""
    num_slots = num_slots_of(rows.shape[1])
    counts = rows[:, 0].astype(np.int64)
    out = []
    for row, count in zip(rows, counts.tolist()):
        kept = min(count, num_slots)
        indices = row[1 : 1 + kept].astype(np.int64)
        values = row[1 + num_slots : 1 + num_slots + kept]
        order = np.argsort(indices, kind="stable")
        out.append(SparseRow(indices[order], values[order].astype(np.float32, copy=True), count))
    return out
