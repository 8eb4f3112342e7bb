"""Reading a Hugging Face state dict into one of the engine's models: bare names, the heads
the engine never runs set aside, and no tensor silently dropped."""

from __future__ import annotations

import torch
from torch import nn


def bare_tensors(state: dict[str, torch.Tensor], ignored: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """The state's tensors with a `model.` prefix dropped (a ...ForCausalLM save), leaving out
    those whose names start with one of `ignored` (an LM head, a classifier)."""
    tensors = {}
    for name, tensor in state.items():
        name = name.removeprefix("model.")
        if not name.startswith(ignored):
            tensors[name] = tensor
    return tensors


def load_exactly(model: nn.Module, renamed: dict[str, torch.Tensor], leftover: dict[str, torch.Tensor],
                 architecture: str) -> None:
    """Load `renamed` strictly. A tensor still in `leftover` means the checkpoint is not what
    we think it is, so it is refused rather than dropped."""
    if leftover:
        raise ValueError(f"unexpected {architecture} tensors: {sorted(leftover)[:5]}")
    model.load_state_dict(renamed, strict=True)
