"""One vector per segment of a packed stream, as sentence-transformers' Pooling computes it.

A segment is ordinarily a whole sequence; a late-chunked document pools one segment per chunk
and leaves its special tokens out (engine/contract/batch.py). Modes: "cls" (first token), "last" (last
token), "mean", "max", "mean_sqrt_len" (the sum over sqrt(length)), "weighted_mean" (token i
of a segment weighted by i + 1); "a+b" concatenates. Every mode runs without host syncs
(sizes are given), so it can live inside a CUDA graph.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rose_embed.engine.contract.config import POOLING_MODES
from rose_embed.engine.rose.layers import fused


def pool(hidden: torch.Tensor, cu_seqlens: torch.Tensor, mode: str) -> torch.Tensor:
    """hidden [T, H], cu_seqlens [B+1] (int32, on hidden's device) -> [B, H * modes] in float32:
    one vector per sequence."""
    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).long()
    num_seqs = len(lengths)
    segment_ids = torch.repeat_interleave(torch.arange(num_seqs, device=hidden.device), lengths,
                                          output_size=hidden.shape[0])
    return pool_segments(hidden, segment_ids, num_seqs, mode)


def pool_segments(hidden: torch.Tensor, segment_ids: torch.Tensor, num_segments: int, mode: str) -> torch.Tensor:
    """hidden [T, H], segment_ids [T] (int, on hidden's device; -1: a token no segment reads)
    -> [num_segments, H * modes] in float32.

    A segment's tokens lie in one run. Segments without tokens (padding) pool to zeros (or a
    valid row, for cls / last); the caller drops them.
    """
    modes = mode.split("+")
    for name in modes:
        if name not in POOLING_MODES:
            raise ValueError(f"unknown pooling mode {name!r}")
    segments = _Segments(hidden, segment_ids, num_segments)
    parts = [segments.pool(name) for name in modes]
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)


# Modes that pool one token of each segment: its final state is the whole of the segment's vector.
ONE_TOKEN_MODES = ("cls", "last")


def pooled_token_rows(segment_ids: torch.Tensor, num_segments: int, mode: str) -> torch.Tensor:
    """[num_segments] int64: the row of the packed stream that a one-token mode ("cls", "last")
    pools for each segment; a segment without tokens (padding) names a valid row, whose vector
    the caller drops."""
    if mode not in ONE_TOKEN_MODES:
        raise ValueError(f"pooling mode {mode!r} reads more than one token of a segment")
    return _one_token_rows(_segment_index(segment_ids, num_segments), num_segments, mode)


def _segment_index(segment_ids: torch.Tensor, num_segments: int) -> torch.Tensor:
    """[T] int64 in [0, num_segments]: each token's segment, `num_segments` for tokens outside every segment."""
    ids = segment_ids.long()
    return torch.where(ids < 0, num_segments, ids)


def _bound(index: torch.Tensor, num_segments: int, reduce: str, empty: int) -> torch.Tensor:
    """[S + 1] int64: each segment's first (amin) or last (amax) token index; `empty` where none."""
    positions = torch.arange(index.shape[0], device=index.device)
    bounds = torch.full((num_segments + 1,), empty, dtype=torch.long, device=index.device)
    return bounds.scatter_reduce_(0, index, positions, reduce=reduce, include_self=True)


def _one_token_rows(index: torch.Tensor, num_segments: int, mode: str) -> torch.Tensor:
    """[S] int64: each segment's first ("cls") or last ("last") token index. Empty (padding)
    segments bound nothing: clamped, their (dropped) rows are valid ones."""
    num_tokens = index.shape[0]
    if mode == "cls":
        return _bound(index, num_segments, "amin", num_tokens)[:num_segments].clamp(max=num_tokens - 1)
    return _bound(index, num_segments, "amax", -1)[:num_segments].clamp(min=0)


class _Segments:
    """Per-segment sums, lengths and bounds, built once for all modes of one call.

    Tokens outside every segment are pooled into one more row, `num_segments`, which is
    dropped: every tensor keeps its shape whatever the batch, as a CUDA graph needs.
    """

    def __init__(self, hidden: torch.Tensor, segment_ids: torch.Tensor, num_segments: int):
        self.hidden, self.num_segments = hidden, num_segments
        self.index = _segment_index(segment_ids, num_segments)
        self._lengths: torch.Tensor | None = None
        self._sums: torch.Tensor | None = None
        self._starts: torch.Tensor | None = None

    def _scatter_sum(self, values: torch.Tensor) -> torch.Tensor:
        # Float32 atomic adds into [S + 1, H]: fast at any T, and free of host syncs. The order
        # of the adds varies from run to run, by ~1e-7 relative: far below bf16's resolution.
        # (A running sum along T was exact but ran as one serial scan per column: ~8 ms at T=16384.)
        return fused.segment_sums(values, self.index, self.num_segments + 1)[: self.num_segments]

    @property
    def lengths(self) -> torch.Tensor:
        """[S] float32: tokens per segment (whole numbers, exact in float32)."""
        if self._lengths is None:
            ones = torch.ones(self.index.shape[0], 1, dtype=torch.float32, device=self.hidden.device)
            self._lengths = self._scatter_sum(ones)[:, 0]
        return self._lengths

    def sums(self) -> torch.Tensor:
        if self._sums is None:
            self._sums = self._scatter_sum(self.hidden)  # summed in float32 either way
        return self._sums

    @property
    def starts(self) -> torch.Tensor:
        if self._starts is None:
            self._starts = _bound(self.index, self.num_segments, "amin", self.index.shape[0])
        return self._starts

    def pool(self, mode: str) -> torch.Tensor:
        hidden, num_tokens, count = self.hidden, self.hidden.shape[0], self.num_segments
        if mode in ONE_TOKEN_MODES:
            return hidden[_one_token_rows(self.index, count, mode)].float()
        if mode == "mean":
            return self.sums() / self.lengths.clamp(min=1).unsqueeze(1)
        if mode == "mean_sqrt_len":
            return self.sums() / self.lengths.clamp(min=1).unsqueeze(1).sqrt()
        if mode == "max":
            index = self.index.unsqueeze(1).expand(-1, hidden.shape[1])
            out = torch.full((count + 1, hidden.shape[1]), float("-inf"), dtype=torch.float32, device=hidden.device)
            out = out.scatter_reduce(0, index, hidden.float(), reduce="amax", include_self=True)[:count]
            return torch.where(self.lengths.unsqueeze(1) > 0, out, 0.0)
        if mode == "weighted_mean":
            # Weights 1..n by position in the segment; their sum is n (n + 1) / 2.
            position = torch.arange(num_tokens, device=hidden.device) - self.starts[self.index]
            weighted = self._scatter_sum(hidden.float() * (position + 1).unsqueeze(1).float())
            n = self.lengths
            return weighted / (n * (n + 1) / 2).clamp(min=1).unsqueeze(1)
        raise ValueError(f"unknown pooling mode {mode!r}")


def normalize(vectors: torch.Tensor) -> torch.Tensor:
    return F.normalize(vectors, p=2.0, dim=-1)
