"""The fused steps between the matmuls (engine/rose/layers/fused.py) in the variants that feed
an FP8 linear layer: each also writes its output as QuantizedRows (engine/rose/quantization/fp8.py),
in the same pass on CUDA (engine/rose/quantization/triton_fp8_kernels.py).

Each is defined by its reference here: the bf16 step as fused.py defines it, then
quantize_rows_reference on that output as it stands in the activation dtype. On the CPU, and
on CUDA with the fused kernels off, the references run; tests/gpu/test_fp8_gpu.py holds the
kernels to them.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from rose_embed.engine.rose.layers import fused
from rose_embed.engine.rose.quantization import cublaslt_fp8
from rose_embed.engine.rose.quantization.fp8 import Fp8Linear, fp8_kernels_for, quantize_rows
from rose_embed.engine.rose.quantization.quantized_rows import QuantizedRows, bounded_scales, quantize_rows_at

# The BERT family's activation after its up projection: linear_gelu's `approximate` ("none",
# "tanh") or None for ReLU -> the kernels' name for it.
BERT_ACTIVATIONS = {"none": "gelu", "tanh": "gelu_tanh", None: "relu"}
# The activation a GEMM at one scale per operand applies in its epilogue, by the model's: cuBLASLt
# has GELU in its tanh form alone, which differs from erf's by under 5e-4, a hundredth of e4m3's
# step at 1.
EPILOGUE_ACTIVATIONS = {"gelu": "gelu_tanh", "gelu_tanh": "gelu_tanh", "relu": "relu"}
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
                        eps: float, scale: torch.Tensor | None = None) -> tuple[torch.Tensor, QuantizedRows]:
    """fused.add_layer_norm's output [T, H] (the next residual) and its QuantizedRows (the next
    linear's input): a scale per row, or the one `scale` [1, 1] given (Fp8Linear.input_scale)."""
    kernels = fp8_kernels_for(x)
    if kernels is not None and x.is_contiguous() and residual.is_contiguous():
        return kernels.add_layer_norm_rows(x, residual, weight, bias, eps, scale)
    out = fused.add_layer_norm(x, residual, weight, bias, eps)
    return out, quantize_rows(out) if scale is None else quantize_rows_at(out, scale)


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


def linear_activation_rows(linear: Fp8Linear, rows: QuantizedRows, activation_name: str,
                           in_epilogue: bool = False) -> QuantizedRows:
    """act(linear(rows)) [T, I] as QuantizedRows, act one of "gelu", "gelu_tanh", "relu": the BERT
    family's up projection and its activation on their way to an FP8 down projection, at one
    scale per operand where the linear takes them so, else at scales bounded per row."""
    if linear.one_scale:
        return _one_scale_linear_activation_rows(linear, rows, activation_name)
    return _bounded_linear_activation_rows(linear, rows, activation_name, in_epilogue)


def _bounded_linear_activation_rows(linear: Fp8Linear, rows: QuantizedRows, activation_name: str,
                                    in_epilogue: bool) -> QuantizedRows:
    """act(linear(rows)) [T, I] as QuantizedRows at the scales linear.scale_bound gives from
    rows.scales (quantized_rows.bounded_scales), act one of "gelu", "gelu_tanh", "relu": the BERT
    family's up projection and its activation on their way to an FP8 down projection. Since the
    scales are known before the GEMM runs, no step needs a whole row: on CUDA the GEMM writes bf16
    and one elementwise kernel activates and quantizes it; with `in_epilogue`, one Triton GEMM
    whose epilogue does both (engine/rose/quantization/triton_fp8_gemm.py; slower than cuBLAS's GEMM
    and the pass so far: bench/probes/fp8_gemm_epilogue.py). The reference: the bf16 GEMM output
    activated in bf16, then quantized at those scales."""
    kernels = fp8_kernels_for(rows.values)
    if kernels is not None and in_epilogue and rows.values.is_contiguous() and linear.out_dtype == torch.bfloat16:
        return _triton_fp8_gemm().linear_activation_rows(rows, linear.weight, linear.weight_scale, linear.bias,
                                                         linear.scale_bound, activation_name, linear.fast_accumulation)
    h = linear(rows)
    if kernels is not None and h.is_contiguous():
        return kernels.activation_rows_at_scales(h, rows.scales, linear.scale_bound, activation_name)
    return quantize_rows_at(_ACTIVATIONS[activation_name](h), bounded_scales(rows.scales, linear.scale_bound))


def _one_scale_linear_activation_rows(linear: Fp8Linear, rows: QuantizedRows, activation_name: str) -> QuantizedRows:
    """act(linear(rows)) for a linear at one scale per operand (Fp8Linear.one_scale), quantized at
    its activation_scale, the one scale [1, 1] its down projection reads. GELU takes its tanh
    form whatever the model's (EPILOGUE_ACTIVATIONS). On CUDA one cuBLASLt GEMM applies the bias
    and the activation to its float32 accumulator and writes e4m3 (engine/rose/quantization/cublaslt_fp8.py);
    where cuBLASLt serves no such GEMM, and as the reference, the GEMM's output in the linear's
    dtype, activated in float32, then quantized."""
    activation_name = EPILOGUE_ACTIVATIONS[activation_name]
    # cuBLASLt's GEMM is described with a bf16 bias: other dtypes take the reference.
    if fp8_kernels_for(rows.values) is not None and rows.values.is_contiguous() and linear.out_dtype == torch.bfloat16:
        values = cublaslt_fp8.scaled_matmul(rows.values, rows.scales, linear.weight, linear.weight_scale, linear.bias,
                                            activation_name, torch.float8_e4m3fn, linear.activation_scale_inverse,
                                            linear.fast_accumulation, rowwise=False,
                                            workspace_limits=cublaslt_fp8.workspace_limits(linear.workspace_free))
        if values is not None:
            return QuantizedRows(values, linear.activation_scale)
    h = linear(rows).float()
    return quantize_rows_at(_ACTIVATIONS[activation_name](h), linear.activation_scale)


@functools.cache
def _triton_fp8_gemm():
    from rose_embed.engine.rose.quantization import triton_fp8_gemm

    return triton_fp8_gemm


def activation(x: torch.Tensor, activation_name: str) -> torch.Tensor:
    """act(x) in x's dtype: the reference activation_rows quantizes."""
    return _ACTIVATIONS[activation_name](x)
