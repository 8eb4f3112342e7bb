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
    input_ids = np.concatenate(seqs).astype(np.int32, copy=False) if seqs else np.zeros(0, np.int32)
    return pack_flat(input_ids, lengths)


def pack_flat(input_ids: np.ndarray, lengths: np.ndarray) -> PackedBatch:
    """Sequences already laid end to end: input_ids [T] int32, lengths [B] int32 summing to T."""
    if len(lengths) == 0 or lengths.min() < 1:
        raise ValueError("a batch needs at least one sequence, each of at least one token")
    cu_seqlens = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=cu_seqlens[1:])
    # Position of each token inside its own sequence: global index minus its sequence start.
    starts = np.repeat(cu_seqlens[:-1], lengths)
    positions = np.arange(len(input_ids), dtype=np.int32) - starts
    return PackedBatch(input_ids, positions, cu_seqlens, int(lengths.max()))


def cut_batches(lengths: list[int], max_tokens: int, max_seqs: int) -> list[tuple[int, int]]:
    """Split a sequence of lengths, in order, into [lo, hi) ranges within both caps."""
    cu_seqlens = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=cu_seqlens[1:])
    return batch_ranges(cu_seqlens, max_tokens, max_seqs)


def batch_ranges(cu_seqlens: np.ndarray, max_tokens: int, max_seqs: int) -> list[tuple[int, int]]:
    """[lo, hi) ranges of sequences, in order, each within both caps (a longer sequence alone).

    Greedy, as a batch fills: a range ends before the first sequence that would take it past
    a cap. One search per range, not a Python step per sequence.
    """
    num_seqs = len(cu_seqlens) - 1
    ranges, lo = [], 0
    while lo < num_seqs:
        fits = int(np.searchsorted(cu_seqlens, int(cu_seqlens[lo]) + max_tokens, side="right")) - 1
        hi = min(max(fits, lo + 1), lo + max_seqs, num_seqs)
        ranges.append((lo, hi))
        lo = hi
    return ranges


def slice_packed(batch: PackedBatch, lo: int, hi: int) -> PackedBatch:
    """Sequences [lo, hi) of a batch, as a batch of their own (views of its token arrays)."""
    cu = batch.cu_seqlens[lo : hi + 1]
    start, end = int(cu[0]), int(cu[-1])
    return PackedBatch(batch.input_ids[start:end], batch.positions[start:end], (cu - start).astype(np.int32),
                       int(np.diff(cu).max()))


def join_packed(first: PackedBatch, second: PackedBatch) -> PackedBatch:
    """The sequences of `first`, then those of `second`, as one batch."""
    return PackedBatch(np.concatenate([first.input_ids, second.input_ids]),
                       np.concatenate([first.positions, second.positions]),
                       np.concatenate([first.cu_seqlens, second.cu_seqlens[1:] + first.cu_seqlens[-1]]),
                       max(first.max_seqlen, second.max_seqlen))


def split_packed(batch: PackedBatch, max_tokens: int) -> list[PackedBatch]:
    """Cut a batch, in order and at sequence boundaries, into batches of at most max_tokens
    (a longer sequence is a batch of its own). Rejoining their results row by row gives
    the whole batch's: attention and pooling never cross a sequence boundary."""
    if batch.num_tokens <= max_tokens:
        return [batch]
    return [slice_packed(batch, lo, hi) for lo, hi in batch_ranges(batch.cu_seqlens, max_tokens, batch.num_seqs)]
