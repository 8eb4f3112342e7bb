"""The FP8 activation format, QuantizedRows, and its definition: e4m3 values with one float32 scale
per row, the scale putting the row's largest magnitude on e4m3's largest finite value. Every FP8
kernel (engine/rose/quantization/triton_fp8_kernels.py) and the FP8 linear layer (engine/rose/quantization/fp8.py)
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
    """An activation [T, K] as e4m3 values and one float32 scale per row, or one for the whole
    tensor ([1, 1]) where the linear that reads it takes one scale per operand (fp8.Fp8Linear)."""

    values: torch.Tensor  # [T, K] float8_e4m3fn
    scales: torch.Tensor  # [T, 1] float32, or [1, 1]
    # The pooled tokens' rows [S, K] as they stood before quantizing, where the FP8 linear that
    # reads these rows computes those tokens in bf16 (engine/rose/quantization/fp8.py's PooledTokens).
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
    """x [T, K] as e4m3 rows at given scales [T, 1], or [1, 1] for one scale (values past FP8_MAX saturate)."""
    values = (x.float() / scales).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    return QuantizedRows(values, scales)


def quantize_tensor_reference(x: torch.Tensor) -> QuantizedRows:
    """x [N, K] -> e4m3 values at one scale, max|x| / FP8_MAX, as QuantizedRows with scales [1, 1]."""
    scale = x.float().abs().amax().clamp(min=MIN_AMAX).reshape(1, 1) / FP8_MAX
    return quantize_rows_at(x, scale)


# e4m3 rounds to nearest with 3 bits of mantissa: a normal value moves by at most 2^-4 of itself,
# a subnormal one (below 2^-6 in units of the scale) by at most half the smallest step, 2^-10.
_E4M3_RELATIVE_ERROR = 2.0 ** -4
_E4M3_SUBNORMAL_ERROR = 2.0 ** -10
# bf16 rounds to 8 bits of mantissa: what the norm's output loses before it is quantized on a GPU.
_BF16_RELATIVE_ERROR = 2.0 ** -8


def layer_norm_bound(weight: torch.Tensor, bias: torch.Tensor | None) -> float:
    """The largest magnitude layer_norm(x) * weight + bias can take, whatever x [..., H]: the
    normalised values of a row have mean 0 and mean square at most 1, so none passes sqrt(H - 1)."""
    w = weight.detach().double().abs()
    b = 0.0 if bias is None else bias.detach().double().abs()
    return float(((w.numel() - 1) ** 0.5 * w + b).max()) * (1.0 + _BF16_RELATIVE_ERROR) * (1.0 + BOUND_MARGIN)


def layer_norm_linear_bound(weight: torch.Tensor, bias: torch.Tensor | None, norm_weight: torch.Tensor,
                            norm_bias: torch.Tensor | None, input_scale: float) -> float:
    """A bound on |act(y @ weight.T + bias)| for act among GELU, its tanh form and ReLU, where y is
    the output of a layer norm (norm_weight, norm_bias) quantized at `input_scale`, whatever the
    normalised row z: with y = z * g + c, mean(z) = 0 and |z| <= sqrt(H),

        |weight_j . y + bias_j| <= sqrt(H) |weight_j * g - mean(weight_j * g)| + |weight_j . c + bias_j|,

    plus what y's roundings (bf16, then e4m3) move it, at most |e| <= (2^-4 + 2^-8) |y| + 2^-10 scale
    per value, times |weight_j| (Cauchy-Schwarz throughout); the activation adds at most
    ACTIVATION_NEGATIVE_BOUND below zero. Known at load, it gives the activation's one scale."""
    w = weight.detach().double()
    h = w.shape[1]
    g = norm_weight.detach().double()
    c = torch.zeros_like(g) if norm_bias is None else norm_bias.detach().double()
    b = w.new_zeros(w.shape[0]) if bias is None else bias.detach().double()
    folded = w * g
    exact = h ** 0.5 * (folded - folded.mean(dim=1, keepdim=True)).norm(dim=1) + (w @ c + b).abs()
    y_norm = h ** 0.5 * float(g.abs().max()) + float(c.norm())
    relative = (1.0 + _BF16_RELATIVE_ERROR) * (1.0 + _E4M3_RELATIVE_ERROR) - 1.0
    rounding = (relative * y_norm + h ** 0.5 * _E4M3_SUBNORMAL_ERROR * input_scale) * w.norm(dim=1)
    largest = float((exact + rounding).max())
    return max(largest, ACTIVATION_NEGATIVE_BOUND) * (1.0 + BOUND_MARGIN)
