"""The fused steps between the matmuls (engine/rose/layers/fused.py) in the variants that feed
an FP8 linear layer: each also writes its output as QuantizedRows (engine/rose/layers/fp8.py),
in the same pass on CUDA (engine/rose/layers/triton_fp8_kernels.py).

Each is defined by its reference here: the bf16 step as fused.py defines it, then
quantize_rows_reference on that output as it stands in the activation dtype. On the CPU, and
on CUDA with the fused kernels off, the references run; tests/test_fp8_gpu.py holds the
kernels to them.
"""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F

from engine.rose.layers import cublaslt_fp8, fused
from engine.rose.layers.fp8 import Fp8Linear, fp8_kernels_for, quantize_rows
from engine.rose.layers.quantized_rows import (FP8_DTYPE, QuantizedRows, ScaleBound, batch_bounded_scales,
                                               quantize_rows_at)

logger = logging.getLogger("rose_embed.engine")

# The BERT family's activation after its up projection: linear_gelu's `approximate` ("none",
# "tanh") or None for ReLU -> the kernels' name for it.
BERT_ACTIVATIONS = {"none": "gelu", "tanh": "gelu_tanh", None: "relu"}
# What the up step that quantizes its own output computes for each (linear_activation_rows).
UP_STEP_ACTIVATIONS = {"gelu": "gelu_tanh", "gelu_tanh": "gelu_tanh", "relu": "relu"}
# A ScaleBound that leaves the scales it is given as they are (scale * 1 + 0).
GIVEN_SCALES = ScaleBound(1.0, 0.0)
_ACTIVATIONS = {
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
}


def embed_layer_norm_rows(input_ids: torch.Tensor, positions: torch.Tensor, word: torch.Tensor, position: torch.Tensor,
                          token_type: torch.Tensor | None, position_offset: int, weight: torch.Tensor,
                          bias: torch.Tensor, eps: float) -> tuple[torch.Tensor, QuantizedRows]:
    """fused.embed_layer_norm's output [T, H] and its QuantizedRows (the first layer's qkv input)."""
    kernels = fp8_kernels_for(word)
    if kernels is not None and word.is_contiguous() and position.is_contiguous() and bias is not None:
        return kernels.embed_layer_norm_rows(input_ids, positions, word, position, token_type, position_offset,
                                             weight, bias, eps)
    out = fused.embed_layer_norm(input_ids, positions, word, position, token_type, position_offset, weight, bias, eps)
    return out, quantize_rows(out)


def add_layer_norm_rows(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                        eps: float) -> tuple[torch.Tensor, QuantizedRows]:
    """fused.add_layer_norm's output [T, H] (the next residual) and its QuantizedRows (the next linear's input)."""
    kernels = fp8_kernels_for(x)
    if kernels is not None and x.is_contiguous() and residual.is_contiguous():
        return kernels.add_layer_norm_rows(x, residual, weight, bias, eps)
    out = fused.add_layer_norm(x, residual, weight, bias, eps)
    return out, quantize_rows(out)


def rms_norm_rows(x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None,
                  pooled_index: torch.Tensor | None = None) -> QuantizedRows:
    """fused.rms_norm's output as QuantizedRows alone (a pre-norm decoder's norm output feeds
    only the linear after it); with a residual, residual += x in place first, as there. Given
    `pooled_index` (the pooled tokens' rows), their bf16 output too, as QuantizedRows.pooled."""
    kernels = fp8_kernels_for(x)
    if kernels is not None and x.is_contiguous():
        rows = kernels.add_rms_norm_rows(x, residual, weight, eps)
    else:
        rows = quantize_rows(fused.rms_norm(x, weight, eps, residual=residual))
    if pooled_index is None:
        return rows
    summed = x if residual is None else residual  # the sum the norm read, residual updated in place
    return rows._replace(pooled=fused.rms_norm(summed[pooled_index], weight, eps))


def act_and_mul_rows(gate_up: torch.Tensor, activation: str = "silu",
                     pooled_index: torch.Tensor | None = None) -> QuantizedRows:
    """fused.act_and_mul's act(gate) * up [T, I] as QuantizedRows (the down projection's input).
    Given `pooled_index` (the pooled tokens' rows), their bf16 output too, as QuantizedRows.pooled."""
    kernels = fp8_kernels_for(gate_up)
    if kernels is not None and gate_up.is_contiguous():
        rows = kernels.act_and_mul_rows(gate_up, activation)
    else:
        rows = quantize_rows(fused.act_and_mul(gate_up, activation))
    if pooled_index is None:
        return rows
    return rows._replace(pooled=fused.act_and_mul(gate_up[pooled_index], activation))


def activation_rows(x: torch.Tensor, activation: str) -> QuantizedRows:
    """act(x) [T, I] as QuantizedRows, act one of "gelu", "gelu_tanh", "relu": the BERT family's
    up projection output (bias included by its GEMM) on its way to the down projection."""
    kernels = fp8_kernels_for(x)
    if kernels is not None and x.is_contiguous():
        return kernels.activation_rows(x, activation)
    return quantize_rows(_ACTIVATIONS[activation](x))


def linear_activation_rows(linear: Fp8Linear, rows: QuantizedRows, activation_name: str) -> QuantizedRows:
    """act(linear(rows)) [T, I] as QuantizedRows, act one of "gelu", "gelu_tanh", "relu": the BERT
    family's up projection and its activation on their way to an FP8 down projection.

    Its scale is known before the GEMM runs: one for the whole batch, bounded from the rows'
    largest input scale (quantized_rows.batch_bounded_scales), so the GEMM can activate and
    quantize its own output. On CUDA that is one cuBLASLt GEMM whose epilogue adds the bias,
    activates and writes e4m3 (engine/rose/layers/cublaslt_fp8.py); where cuBLASLt has no
    algorithm for it, the GEMM writes bf16 and one elementwise kernel activates and quantizes.
    cuBLASLt's epilogue has GELU's tanh form alone, so the activation is UP_STEP_ACTIVATIONS'
    (as the bf16 up projection computes it on CUDA: fused.linear_gelu). The reference: the GEMM's
    output activated in its dtype, then quantized at that scale."""
    activation_name = UP_STEP_ACTIVATIONS[activation_name]
    kernels = fp8_kernels_for(rows.values)
    if kernels is not None and rows.values.is_contiguous() and linear.out_dtype == torch.bfloat16:
        scales, inverse = kernels.batch_bounded_scales(rows.scales, linear.scale_bound)
        values = _cublaslt_values(linear, rows, activation_name, scales, inverse, kernels)
        if values is not None:
            return QuantizedRows(values, scales)
        return kernels.activation_rows_at_scales(linear(rows), scales, GIVEN_SCALES, activation_name)
    scales = batch_bounded_scales(rows.scales, linear.scale_bound)
    return quantize_rows_at(_ACTIVATIONS[activation_name](linear(rows)), scales)


# Per GPU, whether cuBLASLt's fused up step agreed with the GEMM-and-pass path on its first use.
_cublaslt_agrees: dict[int, bool] = {}
# Two computations of one activation land one e4m3 step apart where they straddle a rounding
# boundary (the pass activates the GEMM's bf16 output, the epilogue its float32 accumulator):
# allowed for this share of the values, and no more than one step.
_SHARE_ONE_STEP_APART = 0.05


def _cublaslt_values(linear: Fp8Linear, rows: QuantizedRows, activation_name: str, scales: torch.Tensor,
                     inverse: torch.Tensor, kernels) -> torch.Tensor | None:
    """The up step's e4m3 values from cuBLASLt's GEMM, or None where it cannot give them, so that
    the GEMM and the elementwise pass run instead. Its first use on a GPU (eager: the engine runs
    each batch shape once before capturing it) is checked against that pass; a GPU where the two
    disagree runs the pass from then on, and the log says so."""
    device = rows.values.device
    agrees = _cublaslt_agrees.get(device.index)
    if agrees is False or not cublaslt_fp8.available(device):
        return None
    if agrees is None and torch.cuda.is_current_stream_capturing():
        return None  # unchecked, and no comparison can run inside a capture
    values = cublaslt_fp8.scaled_matmul(rows.values, rows.scales, linear.weight, linear.weight_scale, linear.bias,
                                        activation_name, FP8_DTYPE, inverse, linear.fast_accumulation)
    if values is None or agrees:
        return values
    passed = kernels.activation_rows_at_scales(linear(rows), scales, GIVEN_SCALES, activation_name).values.float()
    got = values.float()
    step = torch.exp2(torch.floor(torch.log2(passed.abs().clamp(min=2.0 ** -6))) - 3)  # e4m3's spacing there
    agrees = bool((got - passed).abs().le(step).all()) \
        and (got != passed).float().mean().item() <= _SHARE_ONE_STEP_APART
    _cublaslt_agrees[device.index] = agrees
    if not agrees:
        logger.warning("fp8: cuBLASLt's GEMM with the activation in its epilogue disagrees with the GEMM and "
                       "activation pass on %s; the up projections run the pass instead",
                       torch.cuda.get_device_name(device))
        return None
    return values


def activation(x: torch.Tensor, activation_name: str) -> torch.Tensor:
    """act(x) in x's dtype: the reference activation_rows quantizes."""
    return _ACTIVATIONS[activation_name](x)
