"""One vector per sequence of a packed stream: CLS, mean or last token; optional L2 norm."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def pool(hidden: torch.Tensor, cu_seqlens: torch.Tensor, mode: str) -> torch.Tensor:
    """hidden [T, H], cu_seqlens [B+1] (int32, on hidden's device) -> [B, H] in float32.

    Sequences of length zero (padding segments) pool to zeros in "mean" mode; the caller
    drops them.
    """
    starts, ends = cu_seqlens[:-1].long(), cu_seqlens[1:].long()
    if mode == "cls":
        # Zero-length padding segments start at T: clamp so that their (dropped) row is valid.
        return hidden[starts.clamp(max=hidden.shape[0] - 1)].float()
    if mode == "last":
        return hidden[(ends - 1).clamp(min=0)].float()
    if mode == "mean":
        # Segment sums as differences of one running sum: no atomics, so the result is
        # the same bit for bit on every run (graph replay == eager), and no host sync, so
        # it can live inside a CUDA graph. float64 keeps the long running sum exact enough.
        running = torch.zeros(hidden.shape[0] + 1, hidden.shape[1], dtype=torch.float64, device=hidden.device)
        torch.cumsum(hidden, dim=0, dtype=torch.float64, out=running[1:])
        sums = running[ends] - running[starts]
        return (sums / (ends - starts).clamp(min=1).unsqueeze(1)).float()
    raise ValueError(f"unknown pooling mode {mode!r}")


def normalize(vectors: torch.Tensor) -> torch.Tensor:
    return F.normalize(vectors, p=2.0, dim=-1)
