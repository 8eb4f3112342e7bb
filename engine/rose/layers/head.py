"""Token states -> the model's sentence embedding: pooling, then the sentence-transformers
modules after it (Dense, LayerNorm, Normalize; engine/model_files/st_modules.py reads them), truncation to
truncate_dim, and the final L2 normalisation OpenAI's vectors have.

The head runs in float32 on the pooled [S, H] vectors, one per pooling segment (a sequence,
or a late-chunked document's chunk: engine/contract/batch.py), a few small matmuls inside the CUDA
graph with the model; every step after pooling applies to each vector alone.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import nn

from rose_embed.engine.rose.layers.pooling import normalize, pool_segments
from rose_embed.engine.model_files.st_modules import Dense, HeadStep, LayerNorm, Normalize


def _read_tensors(path: Path) -> dict[str, torch.Tensor]:
    if path.suffix == ".safetensors":
        return load_file(str(path))
    return torch.load(path, map_location="cpu", weights_only=True)


def load_weights(module: nn.Module, path: Path) -> None:
    """A module's float32 weights from a safetensors or torch.save file of exactly its tensors."""
    state = {name: tensor.float() for name, tensor in _read_tensors(path).items()}
    missing, unexpected = module.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(f"{path}: weights do not match the module (missing {missing}, unexpected {unexpected})")


class _Dense(nn.Module):
    """sentence-transformers' Dense, with its tensor names (linear.*, residual.weight)."""

    def __init__(self, step: Dense):
        super().__init__()
        self.linear = nn.Linear(step.in_features, step.out_features, bias=step.bias)
        self.activation = getattr(nn, step.activation)()
        self.use_residual = step.use_residual
        if step.use_residual and step.in_features != step.out_features:
            self.residual = nn.Linear(step.in_features, step.out_features, bias=False)
        load_weights(self, step.weights)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.activation(self.linear(x))
        if self.use_residual:
            out = out + (self.residual(x) if hasattr(self, "residual") else x)
        return out


class _LayerNorm(nn.Module):
    def __init__(self, step: LayerNorm):
        super().__init__()
        self.norm = nn.LayerNorm(step.dim)
        load_weights(self, step.weights)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


class _Normalize(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return normalize(x)


def _layer(step: HeadStep) -> nn.Module:
    if isinstance(step, Dense):
        return _Dense(step)
    if isinstance(step, LayerNorm):
        return _LayerNorm(step)
    if isinstance(step, Normalize):
        return _Normalize()
    raise TypeError(f"unknown head step {step!r}")


class SentenceHead(nn.Module):
    """hidden [T, H], segment_ids [T] -> [num_segments, dim] float32; weights load on construction."""

    def __init__(self, pooling: str, steps: tuple[HeadStep, ...] = (), truncate_dim: int | None = None,
                 normalize: bool = True):
        super().__init__()
        self.pooling, self.truncate_dim, self.normalize = pooling, truncate_dim, normalize
        self.steps = nn.ModuleList(_layer(step) for step in steps)

    def forward(self, hidden: torch.Tensor, segment_ids: torch.Tensor, num_segments: int) -> torch.Tensor:
        vectors = pool_segments(hidden, segment_ids, num_segments, self.pooling)
        for step in self.steps:
            vectors = step(vectors)
        if self.truncate_dim is not None:
            vectors = vectors[:, : self.truncate_dim]
        return normalize(vectors) if self.normalize else vectors
