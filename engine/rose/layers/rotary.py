"""Rotary position embedding (RoPE), indexed by the packed stream's positions.

Hugging Face's Qwen3 rotates NeoX style: dimension i pairs with i + head_dim/2. Rotating
those halves means strided reads that PyTorch's elementwise kernels cannot vectorise
(seven of them per tensor per layer). Instead the loader reorders the rows of q_proj and
k_proj (and the q_norm / k_norm weights) so that each pair sits side by side
(`interleave_rotary_halves`); a pair is then one complex number and the rotation one
complex multiply. Attention is unchanged, since q and k are permuted alike inside each
head and q·k does not depend on the order of the head dimensions; v is not permuted.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


def rope_theta(config: dict) -> float:
    """rope_theta from a config.json of either transformers 4.x (`rope_theta`) or 5.x
    (`rope_parameters`); only plain RoPE is supported (no YaRN / dynamic scaling)."""
    params = config.get("rope_parameters") or {}
    scaling = config.get("rope_scaling") or {}
    for spec in (params, scaling):
        kind = spec.get("rope_type", spec.get("type", "default"))
        if kind not in ("default", None):
            raise ValueError(f"rope_type {kind!r} is not supported (only plain RoPE)")
    return float(config.get("rope_theta") or params.get("rope_theta") or 10000.0)


def layer_type_rope_theta(config: dict, layer_type: str, legacy_key: str, default: float) -> float:
    """rope_theta of one layer type ("full_attention" | "sliding_attention") of a model with
    two (ModernBERT, Gemma3): transformers 5.x writes `rope_parameters[layer_type]`, 4.x a
    key of its own per type (`legacy_key`); only plain RoPE is supported."""
    params = (config.get("rope_parameters") or {}).get(layer_type)
    if isinstance(params, dict):
        kind = params.get("rope_type", params.get("type", "default"))
        if kind not in ("default", None):
            raise ValueError(f"rope_type {kind!r} is not supported (only plain RoPE)")
        if params.get("rope_theta"):
            return float(params["rope_theta"])
    return float(config.get(legacy_key) or default)


def interleave_rotary_halves(weight: torch.Tensor, head_dim: int) -> torch.Tensor:
    """Reorder a per-head tensor ([num_heads * head_dim, ...] rows, or one head's
    [head_dim] norm weight) from NeoX halves to adjacent pairs: new 2i <- i, 2i+1 <- i + head_dim/2."""
    perm = torch.arange(head_dim).view(2, head_dim // 2).t().reshape(-1)
    return weight.reshape(-1, head_dim, *weight.shape[1:])[:, perm].reshape(weight.shape)


class RotaryEmbedding(nn.Module):
    """cos / sin tabulated in float32 for every position up to max_position_embeddings
    ([P, head_dim/2] each); non-persistent buffers, so `.to(dtype)` rounds them the way
    the reference rounds its cos / sin to the activation dtype."""

    def __init__(self, head_dim: int, max_position_embeddings: int, base: float):
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"rotary head_dim must be even; got {head_dim}")
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
        freqs = torch.outer(torch.arange(max_position_embeddings, dtype=torch.float32), inv_freq)
        self.register_buffer("cos_cached", freqs.cos(), persistent=False)
        self.register_buffer("sin_cached", freqs.sin(), persistent=False)

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        """positions [T] -> rotations [T, 1, head_dim/2] (complex64), once per batch for all layers."""
        cos = self.cos_cached.index_select(0, positions).float()
        sin = self.sin_cached.index_select(0, positions).float()
        return torch.complex(cos, sin).unsqueeze(1)

    def for_batch(self, positions: torch.Tensor, tables_only: bool) -> "RotaryBatch":
        """What every layer of one batch needs; `tables_only` (the fused kernel reads the tables
        by position itself) skips building the complex rotations."""
        rotations = None if tables_only else self(positions)
        return RotaryBatch(positions, self.cos_cached, self.sin_cached, rotations)


class GlobalLocalRotary(nn.Module):
    """The two tables of a model whose global and local layers rotate with their own bases
    (ModernBERT, Gemma3); `legacy_keys` / `defaults`: the 4.x config keys of the global and
    the local base, and the values transformers assumes without them."""

    def __init__(self, config: dict, head_dim: int, max_position_embeddings: int, legacy_keys: tuple[str, str],
                 defaults: tuple[float, float]):
        super().__init__()
        self.full = RotaryEmbedding(head_dim, max_position_embeddings,
                                    layer_type_rope_theta(config, "full_attention", legacy_keys[0], defaults[0]))
        self.sliding = RotaryEmbedding(head_dim, max_position_embeddings,
                                       layer_type_rope_theta(config, "sliding_attention", legacy_keys[1], defaults[1]))

    def for_batch(self, positions: torch.Tensor, tables_only: bool) -> tuple["RotaryBatch", "RotaryBatch"]:
        """(global, local) rotations of one batch, shared by all layers of each kind."""
        return self.full.for_batch(positions, tables_only), self.sliding.for_batch(positions, tables_only)


@dataclass(frozen=True)
class RotaryBatch:
    positions: torch.Tensor  # [T]
    cos: torch.Tensor  # [max_position_embeddings, head_dim/2] tables
    sin: torch.Tensor
    rotations: torch.Tensor | None  # [T, 1, head_dim/2] complex64, for apply_rotary


def apply_rotary(x: torch.Tensor, rotations: torch.Tensor) -> torch.Tensor:
    """x [T, H, D] with interleaved pairs, rotations [T, 1, D/2] -> x rotated, in x's dtype.
    The multiply runs in float32 (complex64) whatever x's dtype."""
    pairs = torch.view_as_complex(x.float().unflatten(-1, (-1, 2)))
    return torch.view_as_real(pairs * rotations).flatten(-2).to(x.dtype)
