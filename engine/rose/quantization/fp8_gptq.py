"""FP8 weights rounded by GPTQ: each weight's e4m3 rounding error is fed forward onto the weights
of the same output channel not yet rounded, in proportion to how the layer's inputs correlate,
so that the layer's outputs (not its weights one by one) land as close as e4m3 allows
(Frantar et al., "GPTQ", 2022). The scales stay those of rounding to nearest (max |row| / 448);
only which e4m3 value each weight takes changes, once, at load: the GEMM is the same.

Why: on the benchmark shapes most of FP8's error comes from the weights, not the activations
(a weight's error is the same for every token; bench/results/fp8/README.md), and GPTQ more than halves it.

The inputs' correlations H = X^T X come from the unquantized model embedding built-in texts
(data/fp8_calibration.jsonl: document-sized texts, none of them among the texts the benchmarks
and tests measure quality on), a few layers at a time so that their H and the rounding's working
memory fit a budget; each pass's layers are rounded before the next pass records.

GPTQ rounds a weight's columns one after another, a handful of small steps each, so its time goes to
launching them: every linear of one shape in a pass (the same projection of every layer) is rounded
at once, as one stack, which takes the sequential steps from one per column of every linear to one
per column of each shape.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from rose_embed.engine.rose.quantization.int8_calibration import CALIBRATION_TEXTS
from rose_embed.engine.rose.quantization.quantized_rows import FP8_DTYPE, FP8_MAX, MIN_AMAX, QuantizedRows
from rose_embed.engine.rose.quantization.module_swap import replace_submodule

CALIBRATION_FILE = Path(__file__).parent / "data" / "fp8_calibration.jsonl"
# Columns rounded one at a time within a block; the blocks' errors are fed forward as one matmul.
BLOCK = 128
# Added to H's diagonal, as a share of its mean: keeps H invertible where the texts leave a
# direction unseen (H has at most one rank per calibration token).
DAMPING = 0.01
# Bytes a pass may hold (H and the rounding's working copies) where the device's free memory is not
# known or smaller; layers past it wait for another pass over the texts.
MEMORY_BUDGET = 2 << 30


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


@dataclass
class GptqWeights:
    """What gptq_weights chose, and where its time went (for the load's log line)."""

    rows: dict[str, QuantizedRows] = field(default_factory=dict)
    passes: int = 0  # runs of the model over the calibration texts
    recording_s: float = 0.0
    rounding_s: float = 0.0

    def timing(self) -> str:
        return (f"{self.passes} pass(es) over the texts {self.recording_s:.1f} s, "
                f"rounding {self.rounding_s:.1f} s")


def gptq_weights(model: nn.Module, names: list[str], embed: Callable[[list[str]], object], texts: list[str],
                 budget: int | None = None, one_scale: frozenset[str] = frozenset()) -> GptqWeights:
    """The e4m3 QuantizedRows GPTQ chooses for the linear layers `names` of `model`, their inputs'
    second moments recorded while `embed` runs the unquantized model on `texts`; as many layers to a
    pass as `budget` bytes allow (by default MEMORY_BUDGET, or a third of the GPU's free memory
    where that is more). Those in `one_scale` take one scale for the whole weight (every row's the same)."""
    device = next(model.parameters()).device
    if budget is None:
        budget = _budget(device)
    result = GptqWeights()
    for group in _passes(model, names, budget):
        started = time.perf_counter()
        moments = _record(model, group, embed, texts)
        result.passes += 1
        rounding = time.perf_counter()
        result.recording_s += rounding - started
        by_shape: dict[tuple, list[str]] = {}
        for name in group:
            by_shape.setdefault((*model.get_submodule(name).weight.shape, name in one_scale), []).append(name)
        for (*_, whole), same in by_shape.items():
            weights = torch.stack([model.get_submodule(name).weight.detach().to(torch.bfloat16) for name in same])
            stacked = gptq_stack(weights, torch.stack([moments.pop(name) for name in same]), one_scale=whole)
            result.rows.update(zip(same, stacked))
        _synchronize(device)
        result.rounding_s += time.perf_counter() - rounding
    return result


def _synchronize(device: torch.device) -> None:
    """The GPU's queued work finished, so that a step's time is its own."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _budget(device: torch.device) -> int:
    if device.type != "cuda":
        return MEMORY_BUDGET
    free, _ = torch.cuda.mem_get_info(device)
    return max(MEMORY_BUDGET, free // 3)


def _working_bytes(linear: nn.Linear) -> int:
    """What rounding one linear holds at its peak: H and its factors, the weight's float32 copies."""
    n, k = linear.out_features, linear.in_features
    return 4 * (5 * k * k + 3 * n * k)


def _passes(model: nn.Module, names: list[str], budget: int) -> list[list[str]]:
    groups: list[list[str]] = [[]]
    held = 0
    for name in names:
        size = _working_bytes(model.get_submodule(name))
        if groups[-1] and held + size > budget:
            groups.append([])
            held = 0
        groups[-1].append(name)
        held += size
    return [group for group in groups if group]


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
    moments `hessian` [K, K]."""
    return gptq_stack(weight[None], hessian[None], block, damping)[0]


def gptq_stack(weights: torch.Tensor, hessians: torch.Tensor, block: int = BLOCK, damping: float = DAMPING,
               one_scale: bool = False) -> list[QuantizedRows]:
    """gptq_rows for B linears of one shape at once: weights [B, N, K], hessians [B, K, K]; with
    `one_scale`, each linear's rows share the scale of its largest magnitude. Each
    linear's columns are taken in order of decreasing input energy, each rounded, its error spread
    over the row's columns still to come through the inverse H's Cholesky factor. The rows are
    held in units of their scale (the scale is the row's own constant, so the error feeds forward
    the same), where rounding is the cast to e4m3."""
    w = weights.detach().float()
    b, n, k = w.shape
    scales = w.abs().amax(dim=2, keepdim=True).clamp(min=MIN_AMAX) / FP8_MAX  # [B, N, 1]
    if one_scale:
        scales = scales.amax(dim=1, keepdim=True).expand(b, n, 1)
    w = w / scales
    h = hessians.float().clone()
    energy = h.diagonal(dim1=1, dim2=2)  # a view: writes reach h
    unseen = energy == 0  # inputs always zero: their weights never act
    energy[unseen] = 1.0
    w.masked_fill_(unseen[:, None, :], 0.0)
    order = torch.argsort(energy, dim=1, descending=True)  # [B, K]
    w = w.gather(2, order[:, None, :].expand(b, n, k))
    h = h.gather(1, order[:, :, None].expand(b, k, k)).gather(2, order[:, None, :].expand(b, k, k))
    energy = h.diagonal(dim1=1, dim2=2)
    energy.add_(damping * energy.mean(dim=1, keepdim=True))
    inverse = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h)), upper=True)
    del h
    pivots = inverse.diagonal(dim1=1, dim2=2)  # [B, K]
    values = torch.empty(b, n, k, dtype=FP8_DTYPE, device=w.device)
    for start in range(0, k, block):
        stop = min(start + block, k)
        part, part_inverse = w[:, :, start:stop], inverse[:, start:stop, start:stop]  # views: updated in place
        for i in range(stop - start):
            column = part[:, :, i]
            error = (column - column.clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE).float()) / part_inverse[:, i, i, None]
            part[:, :, i + 1:].baddbmm_(error[:, :, None], part_inverse[:, i:i + 1, i + 1:], alpha=-1.0)
        # Each column is left as it stood when it was rounded: round the block and take its errors at once.
        rounded = part.clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
        values[:, :, start:stop] = rounded
        if stop < k:
            errors = (part - rounded.float()) / pivots[:, None, start:stop]
            w[:, :, stop:].baddbmm_(errors, inverse[:, start:stop, stop:], alpha=-1.0)
    restore = torch.argsort(order, dim=1)[:, None, :].expand(b, n, k)
    values = values.view(torch.uint8).gather(2, restore).view(FP8_DTYPE)
    scales = scales.to(torch.float32).contiguous()
    return [QuantizedRows(values[i].contiguous(), scales[i]) for i in range(b)]
