"""Putting a module in a model's place by its dotted name: how the quantization plans swap linear
layers for their FP8 and int8 forms, and how int8's calibration wraps them while it reads them."""

from __future__ import annotations

from torch import nn


def replace_submodule(model: nn.Module, name: str, module: nn.Module) -> nn.Module:
    """Put `module` at `name` (as model.named_modules gives it) in `model`; returns the one it replaces."""
    parent_name, child = name.rsplit(".", 1)
    parent = model.get_submodule(parent_name)
    replaced = getattr(parent, child)
    setattr(parent, child, module)
    return replaced
