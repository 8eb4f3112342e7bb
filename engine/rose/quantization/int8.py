"""int8 linear layers for the CPU: weights int8 with one scale per output channel, activations
quantized per token as the batch runs, multiplied by the CPU's int8 dot products (docs/cpu-int8.md).

A token's activations are quantized symmetrically (its largest magnitude on 127) and shifted by
128 into uint8, which oneDNN's `qlinear_pointwise` takes with zero point 128: on a CPU without AMX,
int8 (signed) activations fall to oneDNN's reference kernel, thousands of times slower. The op
takes one scalar activation scale, so it gets 1.0 and the token's scale multiplies its output.
Under torch.compile with max-autotune and inductor's freezing, the op becomes inductor's C++ GEMM
template on a VNNI / AMX micro-kernel, the token scale, bias and cast run in that template's
epilogue, and the quantization fuses into the pass that produces the activation
(engine/rose/quantization/int8_compile.py).

SmoothQuant: where a linear's input has a few outlier channels (a norm's output), each input
channel j is divided by a factor s_j before quantizing and the weight's column j multiplied by it,
which evens a token's range across channels without changing the product. The factor is folded
into the weight at load; the division happens in the quantizing pass.
"""

from __future__ import annotations

import torch
from torch import nn

# The activation's zero point in uint8: symmetric int8 values in [-127, 127] shifted up.
ZERO_POINT = 128


def weight_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-output-channel symmetric int8: (weight [N, K] int8, scale [N] float32)."""
    weight = weight.float()
    scale = weight.abs().amax(1).clamp(min=1e-12) / 127
    return torch.round(weight / scale[:, None]).clamp(-127, 127).to(torch.int8), scale


def token_scales(x: torch.Tensor) -> torch.Tensor:
    """Per-token (row) symmetric scale [M, 1] float32: the row's largest magnitude maps to 127."""
    return x.abs().amax(-1, keepdim=True).float().clamp(min=1e-12) / 127


def quantize_tokens(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] (float32) -> (uint8 [M, K] with zero point 128, scale [M, 1] float32)."""
    scale = token_scales(x)
    return (torch.round(x / scale).clamp(-127, 127) + ZERO_POINT).to(torch.uint8), scale


def smoothing_factors(activation_max: torch.Tensor, weight: torch.Tensor, alpha: float) -> torch.Tensor:
    """SmoothQuant's per-input-channel factor s_j = max|X_j|^alpha / max|W_j|^(1 - alpha) [K] float32,
    from the calibrated activation maxima [K] and the weight [N, K] (over every output row, so q, k
    and v of a fused projection share one factor)."""
    act = activation_max.float().clamp(min=1e-5)
    column = weight.detach().float().abs().amax(0).clamp(min=1e-5)
    return (act ** alpha / column ** (1 - alpha)).clamp(min=1e-5)


class Int8Linear(nn.Module):
    """nn.Linear's x @ weight.T + bias with an int8 weight (per-channel scales) and per-token uint8
    activations; `smoothing` [K] (SmoothQuant's factors) or None. Output in the linear's dtype.
    Build it after the model's last dtype change: Module.to(dtype) would cast its buffers."""

    def __init__(self, linear: nn.Linear, smoothing: torch.Tensor | None = None):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.out_dtype = linear.weight.dtype
        weight = linear.weight.detach().float()
        if smoothing is not None:
            weight = weight * smoothing[None, :]
        qweight, scale = weight_int8(weight)
        self.register_buffer("packed_weight", torch.ops.onednn.qlinear_prepack(qweight, None))
        self.register_buffer("weight_scale", scale)  # [N] float32
        self.register_buffer("weight_zero_point", torch.zeros(self.out_features, dtype=torch.long))
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().float().clone())
        # Dividing by the factor is a multiply by its reciprocal, in the quantizing pass.
        self.register_buffer("inverse_smoothing", None if smoothing is None else (1 / smoothing).float())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(-1, shape[-1]).float()
        if self.inverse_smoothing is not None:
            x = x * self.inverse_smoothing
        values, scale = quantize_tokens(x)
        out = torch.ops.onednn.qlinear_pointwise(values, 1.0, ZERO_POINT, self.packed_weight, self.weight_scale,
                                                 self.weight_zero_point, None, 1.0, 0, torch.float32, "none", [], "")
        out = out * scale
        if self.bias is not None:
            out = out + self.bias
        return out.to(self.out_dtype).reshape(*shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        smoothed = ", SmoothQuant" if self.inverse_smoothing is not None else ""
        return f"in_features={self.in_features}, out_features={self.out_features}, int8{smoothed}"
