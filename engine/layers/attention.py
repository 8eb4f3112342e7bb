"""Ragged (varlen) attention over a packed stream, behind one small interface.

q [T, num_heads, head_dim], k and v [T, num_kv_heads, head_dim] -> out [T, num_heads, head_dim];
sequence b owns rows cu_seqlens[b]:cu_seqlens[b+1] and attends only inside them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class AttentionShape:
    num_heads: int
    num_kv_heads: int
    head_dim: int
    is_causal: bool

    @property
    def scale(self) -> float:
        return self.head_dim**-0.5


class AttentionBackend(Protocol):
    """Per-batch metadata once (`prepare`), then one call per layer (`forward`)."""

    name: str

    def prepare(self, cu_seqlens: torch.Tensor, cu_seqlens_host: list[int], max_seqlen: int) -> object: ...

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: object) -> torch.Tensor: ...


class SDPAPerSequenceBackend:
    """CPU path: PyTorch SDPA on each sequence's slice.

    Exact (no padding enters any softmax) and cheap on CPU, where a few hundred small
    calls per layer cost far less than the dense layers around them.
    """

    name = "sdpa"

    def __init__(self, shape: AttentionShape):
        self.shape = shape

    def prepare(self, cu_seqlens: torch.Tensor, cu_seqlens_host: list[int], max_seqlen: int) -> list[int]:
        return cu_seqlens_host

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: list[int]) -> torch.Tensor:
        out = torch.empty_like(q)
        grouped = self.shape.num_kv_heads != self.shape.num_heads
        for start, end in zip(meta[:-1], meta[1:]):
            if end == start:
                continue
            # [L, H, D] -> [H, L, D], the layout SDPA expects.
            out[start:end] = F.scaled_dot_product_attention(
                q[start:end].transpose(0, 1),
                k[start:end].transpose(0, 1),
                v[start:end].transpose(0, 1),
                is_causal=self.shape.is_causal,
                scale=self.shape.scale,
                enable_gqa=grouped,
            ).transpose(0, 1)
        return out


def make_attention_backend(
    name: str, shape: AttentionShape, device: torch.device, dtype: torch.dtype = torch.float32
) -> AttentionBackend:
    """The backend called `name` ("auto" picks the best available for the device)."""
    if device.type == "cpu":
        if name not in ("auto", "sdpa"):
            raise ValueError(f"attention backend {name!r} needs CUDA; on CPU only 'sdpa' runs")
        from engine.layers.attention_cpu import GroupedSDPABackend

        return GroupedSDPABackend(shape)
    if device.type == "cuda":
        if name == "sdpa":  # exact but slow: kept as a reference for tests
            return SDPAPerSequenceBackend(shape)
        from engine.layers.attention_cuda import make_cuda_attention_backend

        return make_cuda_attention_backend(name, shape, device, dtype)
    raise ValueError(f"no attention backend {name!r} for device {device}")
