"""The FP8 activation format, QuantizedRows, and its definition: e4m3 values with one float32 scale
per row, the scale putting the row's largest magnitude on e4m3's largest finite value. Every FP8
kernel (engine/rose/layers/triton_fp8_kernels.py) and the FP8 linear layer (engine/rose/layers/fp8.py)
follow quantize_rows_reference."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0  # e4m3's largest finite value
# A row of zeros (a padding token's, say) has no largest value: any positive scale gives zeros.
MIN_AMAX = 1e-12
# |act(t)| <= |t| + this for GELU (its least value, about -0.16997, rounded up), its tanh form and ReLU.
ACTIVATION_NEGATIVE_BOUND = 0.17
# Room above a bound for what rounding adds after it (the GEMM's sums, bf16 roundings of its output
# and the activation): far more than they can add; a value past it would saturate at 448.
BOUND_MARGIN = 2.0 ** -6


class QuantizedRows(NamedTuple):
    """An activation [T, K] as e4m3 values and one float32 scale per row."""

    values: torch.Tensor  # [T, K] float8_e4m3fn
    scales: torch.Tensor  # [T, 1] float32
    # The pooled tokens' rows [S, K] as they stood before quantizing, where the FP8 linear that
    # reads these rows computes those tokens in bf16 (engine/rose/layers/fp8.py's PooledTokens).
    pooled: torch.Tensor | None = None


def quantize_rows_reference(x: torch.Tensor) -> QuantizedRows:
    """x [..., K] -> e4m3 rows with scale max|row| / FP8_MAX: what every FP8 kernel must compute."""
    xf = x.float()
    scales = xf.abs().amax(dim=-1, keepdim=True).clamp(min=MIN_AMAX) / FP8_MAX
    values = (xf / scales).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    return QuantizedRows(values, scales)


def dequantize_rows(rows: QuantizedRows) -> torch.Tensor:
    """The float32 values a QuantizedRows stands for."""
    return rows.values.float() * rows.scales


@dataclass(frozen=True)
class ScaleBound:
    """Scales for act(x @ w.T + b) known before the GEMM runs, from its input's scales alone:
    scale = input_scale * weight + offset (scale_bound says why they bound the row)."""

    weight: float
    offset: float


def scale_bound(weight_rows: QuantizedRows, bias: torch.Tensor | None) -> ScaleBound:
    """The ScaleBound of a linear layer with e4m3 weight rows [N, K] and a bias [N], then an
    activation among GELU, its tanh form and ReLU. An input row's values are at most
    FP8_MAX * its scale, so output j is at most FP8_MAX * scale * sum_k |w_jk| + |b_j|, and the
    activation adds at most ACTIVATION_NEGATIVE_BOUND; divided by FP8_MAX, that is the scale."""
    row_sums = (weight_rows.values.float() * weight_rows.scales.reshape(-1, 1)).abs().sum(dim=1)
    largest_bias = 0.0 if bias is None else bias.detach().float().abs().max().item()
    grown = 1.0 + BOUND_MARGIN
    return ScaleBound(row_sums.max().item() * grown, (largest_bias + ACTIVATION_NEGATIVE_BOUND) * grown / FP8_MAX)


def bounded_scales(input_scales: torch.Tensor, bound: ScaleBound) -> torch.Tensor:
    """The scales [T, 1] of act(x @ w.T + b) for an input of scales [T, 1] (float32)."""
    return input_scales * bound.weight + bound.offset


def quantize_rows_at(x: torch.Tensor, scales: torch.Tensor) -> QuantizedRows:
    """x [T, K] as e4m3 rows at given scales [T, 1] (values past FP8_MAX saturate)."""
    values = (x.float() / scales).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    return QuantizedRows(values, scales)
