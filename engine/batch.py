"""Packing: many token-id sequences -> one flat, padding-free stream."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PackedBatch:
    """One batch as the model sees it, on the host.

    input_ids [T] and positions [T] are int32, cu_seqlens [B+1] int32 with
    cu_seqlens[0] == 0 and cu_seqlens[-1] == T.
    """

    input_ids: np.ndarray
    positions: np.ndarray
    cu_seqlens: np.ndarray
    max_seqlen: int

    @property
    def num_seqs(self) -> int:
        return len(self.cu_seqlens) - 1

    @property
    def num_tokens(self) -> int:
        return int(self.cu_seqlens[-1])


def pack(seqs: list[np.ndarray]) -> PackedBatch:
    """Concatenate sequences; each must hold at least one token."""
    lengths = np.fromiter((len(s) for s in seqs), dtype=np.int32, count=len(seqs))
    if len(seqs) == 0 or lengths.min() < 1:
        raise ValueError("a batch needs at least one sequence, each of at least one token")
    cu_seqlens = np.zeros(len(seqs) + 1, dtype=np.int32)
    np.cumsum(lengths, out=cu_seqlens[1:])
    input_ids = np.concatenate(seqs).astype(np.int32, copy=False)
    # Position of each token inside its own sequence: global index minus its sequence start.
    starts = np.repeat(cu_seqlens[:-1], lengths)
    positions = np.arange(len(input_ids), dtype=np.int32) - starts
    return PackedBatch(input_ids, positions, cu_seqlens, int(lengths.max()))


def split_packed(batch: PackedBatch, max_tokens: int) -> list[PackedBatch]:
    """Cut a batch, in order and at sequence boundaries, into batches of at most max_tokens
    (a longer sequence is a batch of its own). Rejoining their results row by row gives
    the whole batch's: attention and pooling never cross a sequence boundary."""
    cu = batch.cu_seqlens
    if batch.num_tokens <= max_tokens:
        return [batch]
    parts, lo = [], 0
    while lo < batch.num_seqs:
        # the last sequence end within max_tokens of this part's start, and at least one sequence
        hi = max(lo + 1, int(np.searchsorted(cu, cu[lo] + max_tokens, side="right")) - 1)
        start, end = int(cu[lo]), int(cu[hi])
        lengths = np.diff(cu[lo : hi + 1])
        parts.append(PackedBatch(batch.input_ids[start:end], batch.positions[start:end],
                                 (cu[lo : hi + 1] - start).astype(np.int32), int(lengths.max())))
        lo = hi
    return parts
