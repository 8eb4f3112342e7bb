"""FP8 weights rounded by GPTQ: each weight's e4m3 rounding error is fed forward onto the weights
of the same output channel not yet rounded, in proportion to how the layer's inputs correlate,
so that the layer's outputs (not its weights one by one) land as close as e4m3 allows
(Frantar et al., "GPTQ", 2022). The scales stay those of rounding to nearest (max |row| / 448);
only which e4m3 value each weight takes changes, once, at load: the GEMM is the same.

Why: on the benchmark shapes most of FP8's error comes from the weights, not the activations
(a weight's error is the same for every token; docs/fp8.md), and GPTQ more than halves it.

The inputs' correlations H = X^T X come from the unquantized model embedding built-in texts
(data/fp8_calibration.jsonl: document-sized texts, none of them among the texts the benchmarks
and tests measure quality on), a few layers at a time so that their H fit in memory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from engine.rose.int8_calibration import CALIBRATION_TEXTS
from engine.rose.layers.quantized_rows import FP8_DTYPE, FP8_MAX, MIN_AMAX, QuantizedRows
from engine.rose.module_swap import replace_submodule

CALIBRATION_FILE = Path(__file__).parent / "data" / "fp8_calibration.jsonl"
# Columns rounded one at a time within a block; the blocks' errors are fed forward as one matmul.
BLOCK = 128
# Added to H's diagonal, as a share of its mean: keeps H invertible where the texts leave a
# direction unseen (H has at most one rank per calibration token).
DAMPING = 0.01
# Bytes of float32 H held at once; layers past it wait for another pass over the texts.
HESSIAN_BUDGET = 2 << 30


def calibration_texts() -> list[str]:
    """The built-in texts GPTQ's H comes from: the short varied ones SmoothQuant calibrates on,
    and 128 document-sized ones."""
    with CALIBRATION_FILE.open(encoding="utf-8") as f:
        return list(CALIBRATION_TEXTS) + [json.loads(line)["text"] for line in f]


class _SecondMoments(nn.Module):
    """A linear layer that adds x^T x of its inputs to `hessian` as it runs. Not an nn.Linear, so a
    model that would fold the layer into a fused step calls it as a module and the input is seen."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.linear = linear
        self.hessian = torch.zeros(linear.in_features, linear.in_features, device=linear.weight.device)
        self.rows = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.detach().reshape(-1, x.shape[-1]).float()
        self.hessian.addmm_(flat.t(), flat)
        self.rows += flat.shape[0]
        return self.linear(x)


def input_second_moments(model: nn.Module, names: list[str], embed: Callable[[list[str]], object],
                         texts: list[str], budget: int = HESSIAN_BUDGET) -> dict[str, torch.Tensor]:
    """{name: mean x x^T [K, K] float32 of the linear layer's inputs} while `embed` runs the model
    on `texts`, as many layers to a pass as `budget` bytes of H allow."""
    moments: dict[str, torch.Tensor] = {}
    group: list[str] = []
    held = 0
    for name in [*names, None]:
        size = 0 if name is None else 4 * model.get_submodule(name).in_features ** 2
        if group and (name is None or held + size > budget):
            moments.update(_record(model, group, embed, texts))
            group, held = [], 0
        if name is not None:
            group.append(name)
            held += size
    return moments


def _record(model: nn.Module, names: list[str], embed: Callable[[list[str]], object],
            texts: list[str]) -> dict[str, torch.Tensor]:
    recorders = {name: _SecondMoments(model.get_submodule(name)) for name in names}
    for name, recorder in recorders.items():
        replace_submodule(model, name, recorder)
    try:
        embed(texts)
    finally:
        for name, recorder in recorders.items():
            replace_submodule(model, name, recorder.linear)
    return {name: r.hessian / max(r.rows, 1) for name, r in recorders.items()}


def gptq_rows(weight: torch.Tensor, hessian: torch.Tensor, block: int = BLOCK, damping: float = DAMPING) -> QuantizedRows:
    """weight [N, K] (its values as the model holds them) -> e4m3 QuantizedRows [N, K] with the
    scales of rounding to nearest, each row's values chosen by GPTQ against the inputs' second
    moments `hessian` [K, K]: columns in order of decreasing input energy, each rounded, its error
    spread over the row's columns still to come through the inverse H's Cholesky factor."""
    w = weight.detach().float().clone()
    n, k = w.shape
    scales = w.abs().amax(dim=1, keepdim=True).clamp(min=MIN_AMAX) / FP8_MAX  # [N, 1]
    h = hessian.float().clone()
    unseen = torch.diag(h) == 0  # inputs always zero: their weights never act
    h[unseen, unseen] = 1.0
    w[:, unseen] = 0.0
    order = torch.argsort(torch.diag(h), descending=True)
    w, h = w[:, order], h[order][:, order]
    h.diagonal().add_(damping * torch.diag(h).mean())
    inverse = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h)), upper=True)
    values = torch.empty(n, k, dtype=FP8_DTYPE, device=w.device)
    for start in range(0, k, block):
        stop = min(start + block, k)
        part, part_inverse = w[:, start:stop].clone(), inverse[start:stop, start:stop]
        errors = torch.empty_like(part)
        for i in range(stop - start):
            column = part[:, i:i + 1]
            rounded = (column / scales).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
            values[:, start + i:start + i + 1] = rounded
            error = (column - rounded.float() * scales) / part_inverse[i, i]
            part[:, i + 1:].addmm_(error, part_inverse[i:i + 1, i + 1:], alpha=-1.0)
            errors[:, i:i + 1] = error
        w[:, stop:].addmm_(errors, inverse[start:stop, stop:], alpha=-1.0)
    values = values[:, torch.argsort(order)]
    return QuantizedRows(values.contiguous(), scales.to(torch.float32))
