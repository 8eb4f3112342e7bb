"""Rotary position embedding, NeoX style (halves rotated), indexed by packed positions."""

from __future__ import annotations

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


class RotaryEmbedding(nn.Module):
    """Applies RoPE to q [T, H, D] and k [T, Hkv, D] at `positions` [T].

    cos / sin are tabulated once in float32 for every position up to
    max_position_embeddings ([P, D/2] each, a non-persistent buffer so that `.to(dtype)`
    casts them the way the reference casts its float32 cos / sin to the activation dtype).
    Indexing the table by the packed stream's positions is what lets many sequences share
    one flat batch: each token rotates by its position inside its own sequence.
    """

    def __init__(self, head_dim: int, max_position_embeddings: int, base: float):
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"rotary head_dim must be even; got {head_dim}")
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
        freqs = torch.outer(torch.arange(max_position_embeddings, dtype=torch.float32), inv_freq)
        self.register_buffer("cos_cached", freqs.cos(), persistent=False)
        self.register_buffer("sin_cached", freqs.sin(), persistent=False)

    @staticmethod
    def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    def forward(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # [T, 1, D/2]: broadcast over heads.
        cos = self.cos_cached.index_select(0, positions).unsqueeze(1).to(q.dtype)
        sin = self.sin_cached.index_select(0, positions).unsqueeze(1).to(q.dtype)
        return self._rotate(q, cos, sin), self._rotate(k, cos, sin)
