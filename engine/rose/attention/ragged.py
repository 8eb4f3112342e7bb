"""Ragged (varlen) attention over a packed stream, behind one small interface.

q [T, num_heads, head_dim], k and v [T, num_kv_heads, head_dim] -> out [T, num_heads, head_dim];
sequence b owns rows cu_seqlens[b]:cu_seqlens[b+1] and attends only inside them.

Beyond plain (causal or bidirectional) attention a model may declare, in its AttentionShape,
a sliding window that its local layers use (ModernBERT, Gemma3, Mistral) and a learned bias
per head and relative distance (MPNet). A backend that cannot compute one of them exactly
refuses the shape when it is built; none ever runs an approximation.

A batch may also hide some sequences' last tokens as keys (engine/contract/hidden_keys.py: a
ColBERT query's [MASK]s that the model does not attend to): `prepare(..., num_keys=...)` then says
how many of its first tokens each sequence's queries see, every token staying a query. Only a
backend that declares `takes_num_keys` is handed one; the engine refuses a model that needs it on
any other.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class AttentionShape:
    num_heads: int
    num_kv_heads: int
    head_dim: int
    is_causal: bool
    softmax_scale: float | None = None  # None: head_dim ** -0.5 (Gemma3 sets its own)
    # (left, right): how many keys before and after its own position a query of a local
    # layer sees (a causal window is (w, 0)); None: the model has no local layers.
    window: tuple[int, int] | None = None
    # The model adds bias[head, key - query] to the scores (MPNet), handed to each forward
    # as a [num_heads, 2 * max_distance + 1] table (see relative_bias_rows).
    has_position_bias: bool = False

    @property
    def scale(self) -> float:
        return self.softmax_scale if self.softmax_scale is not None else self.head_dim**-0.5

    def bounded_by(self, max_seqlen: int) -> AttentionShape:
        """The same attention for sequences of at most max_seqlen tokens: a window that
        no sequence can outgrow is no window (so backends without windows can run it)."""
        if self.window is None:
            return self
        left, right = self.window
        farthest = max_seqlen - 1  # the largest |key - query| inside one sequence
        if left >= farthest and (self.is_causal or right >= farthest):
            return replace(self, window=None)
        return self


def allowed_keys(shape: AttentionShape, length: int, local: bool,
                 device: torch.device | None = None) -> torch.Tensor | None:
    """[length, length] bool: may query i see key j inside one sequence; None: all may.
    Made on `device`, so that a CUDA graph captures it rather than a host-to-device copy."""
    window = shape.window if local else None
    if window is None and not shape.is_causal:
        return None
    positions = torch.arange(length, device=device)
    offset = positions[None, :] - positions[:, None]  # key - query
    allowed = torch.ones(length, length, dtype=torch.bool, device=device)
    if shape.is_causal:
        allowed &= offset <= 0
    if window is not None:
        allowed &= (offset >= -window[0]) & (offset <= window[1])
    return allowed


def relative_bias_rows(table: torch.Tensor, length: int) -> torch.Tensor:
    """A [H, 2R+1] table of bias by relative distance (column R + d for key - query = d)
    -> the [H, length, length] bias of one sequence of `length` tokens."""
    radius = (table.shape[1] - 1) // 2
    offset = torch.arange(length, device=table.device)[None, :] - torch.arange(length, device=table.device)[:, None]
    return table[:, offset.clamp(-radius, radius) + radius]


class AttentionBackend(Protocol):
    """Per-batch metadata once (`prepare`), then one call per layer (`forward`). A backend whose
    `prepare` takes `num_keys` ([B] int32 numpy, each sequence's keys: its first tokens) sets
    `takes_num_keys = True`."""

    name: str

    def prepare(self, cu_seqlens: torch.Tensor, cu_seqlens_host: list[int], max_seqlen: int) -> object: ...

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: object, local: bool = False,
                position_bias: torch.Tensor | None = None) -> torch.Tensor:
        """`local`: a layer of the shape's sliding window; `position_bias`: the model's
        relative-position table (only where the shape declares one)."""


class SDPAPerSequenceBackend:
    """CPU path: PyTorch SDPA on each sequence's slice.

    Exact (no padding enters any softmax) and cheap on CPU, where a few hundred small
    calls per layer cost far less than the dense layers around them.
    """

    name = "sdpa"
    takes_num_keys = True

    def __init__(self, shape: AttentionShape):
        self.shape = shape

    def prepare(self, cu_seqlens: torch.Tensor, cu_seqlens_host: list[int], max_seqlen: int,
                num_keys: np.ndarray | None = None) -> list[tuple[int, int, int]]:
        """(start, end, end of its keys) per sequence."""
        starts, ends = cu_seqlens_host[:-1], cu_seqlens_host[1:]
        key_ends = ends if num_keys is None else [start + int(n) for start, n in zip(starts, num_keys)]
        return list(zip(starts, ends, key_ends))

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: list[tuple[int, int, int]],
                local: bool = False, position_bias: torch.Tensor | None = None) -> torch.Tensor:
        out = torch.empty_like(q)
        grouped = self.shape.num_kv_heads != self.shape.num_heads
        for start, end, key_end in meta:
            if end == start:
                continue
            mask = allowed_keys(self.shape, end - start, local, q.device)
            if position_bias is not None:
                bias = relative_bias_rows(position_bias, end - start).to(q.dtype)
                mask = bias if mask is None else bias.masked_fill(~mask, float("-inf"))
            if key_end < end and mask is not None:  # its last tokens are no keys: the columns stop before them
                mask = mask[..., : key_end - start]
            # [L, H, D] -> [H, L, D], the layout SDPA expects.
            out[start:end] = F.scaled_dot_product_attention(
                q[start:end].transpose(0, 1),
                k[start:key_end].transpose(0, 1),
                v[start:key_end].transpose(0, 1),
                attn_mask=mask,
                is_causal=self.shape.is_causal and mask is None,
                scale=self.shape.scale,
                enable_gqa=grouped,
            ).transpose(0, 1)
        return out
