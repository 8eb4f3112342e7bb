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


def cut_batches(lengths: list[int], max_tokens: int, max_seqs: int) -> list[tuple[int, int]]:
    """Split a sequence of lengths, in order, into [lo, hi) ranges within both caps."""
    ranges, lo, tokens = [], 0, 0
    for i, n in enumerate(lengths):
        if i > lo and (tokens + n > max_tokens or i - lo >= max_seqs):
            ranges.append((lo, i))
            lo, tokens = i, 0
        tokens += n
    if lo < len(lengths):
        ranges.append((lo, len(lengths)))
    return ranges


def split_packed(batch: PackedBatch, max_tokens: int) -> list[PackedBatch]:
    """Cut a batch, in order and at sequence boundaries, into batches of at most max_tokens
    (a longer sequence is a batch of its own). Rejoining their results row by row gives
    the whole batch's: attention and pooling never cross a sequence boundary."""
    if batch.num_tokens <= max_tokens:
        return [batch]
    cu = batch.cu_seqlens
    parts = []
    for lo, hi in cut_batches(np.diff(cu).tolist(), max_tokens, batch.num_seqs):
        start, end = int(cu[lo]), int(cu[hi])
        parts.append(PackedBatch(batch.input_ids[start:end], batch.positions[start:end],
                                 (cu[lo : hi + 1] - start).astype(np.int32), int(np.diff(cu[lo : hi + 1]).max())))
    return parts
