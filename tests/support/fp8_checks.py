"""Comparing QuantizedRows (engine/rose/quantization/quantized_rows.py) made two ways: a kernel and its reference.

Two computations of one activation may differ in the last bits of float32 (or by a rounding
of bf16), and an e4m3 value rounds to nearest: where the two straddle a rounding boundary they
land one e4m3 step apart. So the scales must agree closely, and each value must agree to within
one e4m3 step of its own magnitude, and only a small share of values may differ at all.
"""

from __future__ import annotations

import torch

from rose_embed.engine.rose.quantization.quantized_rows import QuantizedRows


def e4m3_step(values: torch.Tensor) -> torch.Tensor:
    """The spacing of e4m3 values around each of `values` (in e4m3 units): 2^(exponent - 3),
    and 2^-9 among the subnormals."""
    magnitude = values.float().abs().clamp(min=2.0 ** -6)
    return torch.exp2(torch.floor(torch.log2(magnitude)) - 3)


def assert_rows_close(got: QuantizedRows, want: QuantizedRows, scale_rtol: float = 1e-5,
                      max_share_differing: float = 0.01) -> None:
    assert got.values.dtype == want.values.dtype == torch.float8_e4m3fn
    assert got.values.shape == want.values.shape and got.scales.shape == want.scales.shape == (want.values.shape[0], 1)
    assert got.scales.dtype == want.scales.dtype == torch.float32
    torch.testing.assert_close(got.scales.cpu(), want.scales.cpu(), rtol=scale_rtol, atol=0)
    a, b = got.values.cpu().float(), want.values.cpu().float()
    assert (a - b).abs().le(torch.maximum(e4m3_step(a), e4m3_step(b))).all(), "a value differs by more than one step"
    share = (a != b).float().mean().item()
    assert share <= max_share_differing, f"{share:.4f} of the values differ"
