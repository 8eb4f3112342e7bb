"""The FP8 activation format, QuantizedRows, and its definition: e4m3 values with one float32 scale
per row, the scale putting the row's largest magnitude on e4m3's largest finite value. Every FP8
kernel (engine/rose/layers/triton_fp8_kernels.py) and the FP8 linear layer (engine/rose/layers/fp8.py)
follow quantize_rows_reference."""

from __future__ import annotations

from typing import NamedTuple

import torch

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0  # e4m3's largest finite value
# A row of zeros (a padding token's, say) has no largest value: any positive scale gives zeros.
MIN_AMAX = 1e-12


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
