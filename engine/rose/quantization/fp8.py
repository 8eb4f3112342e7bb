"""FP8 (e4m3) linear layers: weights quantized once per output channel, activations per row
(per token) where they are produced, and the GEMM that multiplies the two (docs/fp8.md).

A quantized activation is QuantizedRows: e4m3 values [T, K] and one float32 scale per row
[T, 1], a value standing for e4m3 * scale. A row's scale puts its largest magnitude on e4m3's
largest finite value (448), so no value saturates and small ones keep e4m3's relative
precision down to 2^-14 of the largest. Weights follow the same rule per output channel, from
their bf16 values (what the engine holds on a GPU; the simulation rounds float32 weights to bf16
first, so both quantize the same numbers). The exception is the BERT family's MLP: its up
projection, whose input is a layer norm's output, takes one scale per operand, each bounded at
load (Fp8Linear's `input_norm`), so that cuBLASLt's GEMM can finish the activation and its
quantization in its epilogue; its down projection reads that output at its one scale.

On CUDA the GEMM is cuBLASLt's with rowwise scales (tensorwise at one scale per operand),
called at its best algorithm that needs no workspace (engine/rose/quantization/cublaslt_fp8.py), else
torch._scaled_mm, the same GEMM at the algorithm cuBLAS picks: both multiply e4m3 by e4m3, apply
both scales and the bias to the float32 accumulator and round once to bf16. Elsewhere it is its
definition, the dequantized values multiplied in float32: the CPU simulation of the scheme that the tests hold to the fp32 reference
(tests/unit/test_fp8.py, tests/models/test_fp8_quality.py).
"""

from __future__ import annotations

import functools
import torch
import torch.nn.functional as F
from torch import nn

from rose_embed.engine.rose.layers import fused
from rose_embed.engine.rose.quantization import cublaslt_fp8
from rose_embed.engine.rose.quantization.quantized_rows import (FP8_MAX, QuantizedRows, dequantize_rows, layer_norm_bound,
                                               layer_norm_linear_bound, quantize_rows_at, quantize_rows_reference,
                                               quantize_tensor_reference, scale_bound)

# torch._scaled_mm's operands need K and N in multiples of 16 (its tensor-core tiles).
GEMM_ALIGNMENT = 16


@functools.cache
def _triton_fp8_kernels():
    """The FP8 kernels module, or None where Triton is missing or broken."""
    try:
        from rose_embed.engine.rose.quantization import triton_fp8_kernels
    except Exception:  # ImportError, or a Triton without a working backend
        return None
    return triton_fp8_kernels


def fp8_kernels_for(x: torch.Tensor):
    """The Triton FP8 kernels where they serve x (CUDA, fused kernels on, Triton working), else None."""
    return _triton_fp8_kernels() if fused.uses_triton(x) else None


def quantize_rows(x: torch.Tensor) -> QuantizedRows:
    """[T, K] -> QuantizedRows: a pass of its own, for an activation whose producer is not ours
    (the attention's output). On CUDA one Triton kernel; elsewhere the reference."""
    kernels = fp8_kernels_for(x)
    if kernels is not None and x.dim() == 2 and x.is_contiguous():
        return kernels.quantize_rows(x)
    return quantize_rows_reference(x)


def scaled_matmul(rows: QuantizedRows, weight: torch.Tensor, weight_scale: torch.Tensor, bias: torch.Tensor | None,
                  out_dtype: torch.dtype, fast_accumulation: bool, workspace_free: bool = True) -> torch.Tensor:
    """(rows.values * rows.scales) @ (weight * weight_scale.T).T + bias -> [T, N] in out_dtype.

    weight [N, K] e4m3, weight_scale [1, N] float32 (or [1, 1], with rows.scales [1, 1]: one scale
    per operand). On CUDA one GEMM: with `workspace_free`, cuBLASLt's at its best algorithm that
    needs no workspace, which spares the memset cuBLAS launches before each GEMM at the algorithm
    it picks (bench/probes/fp8_gemm_algos.py), where it serves one and the operands are laid out as it
    reads them; else torch._scaled_mm. With fast_accumulation Hopper's tensor cores keep their
    partial sums at their own reduced precision instead of promoting them to float32 every few
    steps of K (faster; its error is measured in bench/results/fp8/README.md). Elsewhere the definition in
    float32."""
    if rows.values.is_cuda:
        if (workspace_free and rows.values.is_contiguous() and rows.scales.is_contiguous()
                and (bias is None or bias.dtype == torch.bfloat16)):
            out = cublaslt_fp8.scaled_matmul(rows.values, rows.scales, weight, weight_scale, bias, None, out_dtype,
                                             None, fast_accumulation, rowwise=weight_scale.numel() > 1,
                                             workspace_limits=(0,))
            if out is not None:
                return out
        return torch._scaled_mm(rows.values, weight.t(), scale_a=rows.scales, scale_b=weight_scale, bias=bias,
                                out_dtype=out_dtype, use_fast_accum=fast_accumulation)
    dequantized_weight = weight.float() * weight_scale.t()
    out = F.linear(dequantize_rows(rows), dequantized_weight, None if bias is None else bias.float())
    return out.to(out_dtype)


class PooledTokens:
    """The rows of the packed stream whose final state the sentence head pools, one per segment
    (the last token for last-token pooling, the first for CLS): the runner sets `index` [S]
    (int64) for each batch; FP8 linears that keep these tokens bf16 read it.

    With one token pooled, the vector is that token's final state: its own path through the
    layers (its queries, its attention output's projection, its MLP) adds to it directly, while
    the other tokens reach it only through keys and values, averaged by the attention. So
    computing those few rows again in bf16 removes much of the rounding that reaches the vector,
    at the price of a GEMM of one row per segment (bench/results/fp8/README.md has the measurements)."""

    def __init__(self):
        self.index: torch.Tensor | None = None


class Fp8Linear(nn.Module):
    """nn.Linear's x @ weight.T + bias with the weight in e4m3, one scale per output channel.

    It takes x as QuantizedRows (from a producer that quantized it in the same pass, see
    engine/rose/quantization/fp8_fused.py) or as a tensor, which it quantizes in a pass of its own.
    The output is in the dtype the linear had (bf16 on a GPU). Build it after the model's last
    dtype change: Module.to(dtype) would turn its e4m3 weight back into that dtype.

    `weight_rows` are the weight's e4m3 values and scales [N, 1] where they were chosen
    elsewhere (GPTQ); without them each weight is rounded to nearest. At scales per row,
    `scale_bound` bounds the layer's output followed by an activation, for the GEMM that quantizes
    its own activated output (fp8_fused.linear_activation_rows); computed here, at load, since it
    reads the weight.

    Given `pooled`, it also keeps the unquantized weight and computes the pooled tokens' rows
    from their unquantized inputs (QuantizedRows.pooled, or the tensor's rows), in place of
    the FP8 GEMM's rows for them.

    With `one_scale` it takes one scale per operand instead: the weight at one scale, and its
    input as QuantizedRows at one scale [1, 1] (a tensor, it quantizes at one scale of its own).
    Given `input_norm`, the layer norm whose output is its input, that scale is `input_scale`,
    fixed at load from the norm's weight and bias (quantized_rows.layer_norm_bound), and its
    activated output takes `activation_scale` (layer_norm_linear_bound). With every scale known
    before the GEMM runs, cuBLASLt's GEMM can apply bias and GELU and write e4m3 itself
    (fp8_fused.linear_activation_rows): the BERT family's up projection, whose down projection
    then reads its output at that one scale.
    """

    def __init__(self, linear: nn.Linear, fast_accumulation: bool = True, pooled: PooledTokens | None = None,
                 weight_rows: QuantizedRows | None = None, input_norm: nn.LayerNorm | None = None,
                 one_scale: bool = False, workspace_free: bool = True):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.out_dtype = linear.weight.dtype
        self.fast_accumulation = fast_accumulation
        self.workspace_free = workspace_free  # scaled_matmul's
        self.one_scale = one_scale or input_norm is not None
        if self.one_scale and pooled is not None:
            raise ValueError("an FP8 linear at one scale per operand cannot keep the pooled tokens bf16")
        # The weight's e4m3 rows as given (GPTQ's, engine/rose/quantization/fp8_gptq.py), else rounded to nearest.
        rows = weight_rows
        if rows is None:
            weight = linear.weight.detach().to(torch.bfloat16)
            rows = quantize_tensor_reference(weight) if self.one_scale else quantize_rows_reference(weight)
        scales = rows.scales.reshape(1, -1)
        if self.one_scale:
            if not bool((scales == scales[0, 0]).all()):
                raise ValueError("an FP8 linear at one scale per operand got weight rows of several scales")
            scales = scales[:, :1]
        self.register_buffer("weight", rows.values)  # [N, K] e4m3
        self.register_buffer("weight_scale", scales.contiguous())  # [1, N] float32, or [1, 1] at one scale
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().clone())
        self.scale_bound = None if self.one_scale else scale_bound(rows, self.bias)
        # Where a norm bounds its input: that input's scale, its activated output's, and 1 / the
        # latter, which cuBLASLt multiplies its output by to write e4m3 at it.
        for name in ("input_scale", "activation_scale", "activation_scale_inverse"):
            self.register_buffer(name, None)
        if input_norm is not None:
            input_scale = layer_norm_bound(input_norm.weight, input_norm.bias) / FP8_MAX
            dequantized = rows.values.float() * rows.scales.reshape(-1, 1)
            activation_scale = layer_norm_linear_bound(dequantized, self.bias, input_norm.weight, input_norm.bias,
                                                       input_scale) / FP8_MAX
            device = linear.weight.device
            self.input_scale = torch.full((1, 1), input_scale, device=device)
            self.activation_scale = torch.full((1, 1), activation_scale, device=device)
            self.activation_scale_inverse = torch.full((1,), 1.0 / activation_scale, device=device)
        self.pooled = pooled
        # The linear's own weight, not a copy: the pooled tokens' rows are the unquantized layer's.
        self.register_buffer("unquantized_weight", None if pooled is None else linear.weight.detach())

    def forward(self, x: torch.Tensor | QuantizedRows) -> torch.Tensor:
        rows = x if isinstance(x, QuantizedRows) else self.quantize_input(x)
        scales_fit = rows.scales.numel() == 1 if self.one_scale else rows.scales.shape[0] == rows.values.shape[0]
        if not scales_fit:
            raise RuntimeError(f"an FP8 linear at {'one scale' if self.one_scale else 'scales per row'} got an "
                               f"input at scales {tuple(rows.scales.shape)} for {rows.values.shape[0]} rows: its "
                               "producer quantizes at the scales the linear takes")
        out = scaled_matmul(rows, self.weight, self.weight_scale, self.bias, self.out_dtype, self.fast_accumulation,
                            self.workspace_free)
        if self.pooled is not None:
            index = self.pooled.index
            kept = rows.pooled if x is rows else None if index is None else x[index]
            if index is None or kept is None:
                raise RuntimeError("an FP8 linear that keeps the pooled tokens bf16 got no pooled tokens' rows: "
                                   "the runner sets PooledTokens.index, the producer of its input QuantizedRows.pooled")
            out.index_copy_(0, index, F.linear(kept, self.unquantized_weight, self.bias))
        return out

    @property
    def input_norm_bounded(self) -> bool:
        """Whether its input comes at a scale fixed at load from the norm that produces it."""
        return self.input_scale is not None

    def quantize_input(self, x: torch.Tensor) -> QuantizedRows:
        """x as this layer reads it: at one scale where it takes one scale per operand (its
        input_scale, where a norm bounds it, else x's largest magnitude's), else per row."""
        if self.input_norm_bounded:
            return quantize_rows_at(x, self.input_scale)
        return quantize_tensor_reference(x) if self.one_scale else quantize_rows(x)

    def extra_repr(self) -> str:
        scales = "one scale per operand" if self.one_scale else "per-channel weight and per-token input scales"
        return f"in_features={self.in_features}, out_features={self.out_features}, e4m3, {scales}"


def fits_fp8(linear: nn.Module) -> bool:
    """Whether a linear layer's shape suits torch._scaled_mm."""
    return (isinstance(linear, nn.Linear) and linear.in_features % GEMM_ALIGNMENT == 0
            and linear.out_features % GEMM_ALIGNMENT == 0)


def pooled_index(module: nn.Module | None) -> torch.Tensor | None:
    """The pooled tokens' rows [S] where `module` is an FP8 linear that keeps them bf16 (so its
    input's producer must keep them too, as QuantizedRows.pooled), else None."""
    pooled = module.pooled if isinstance(module, Fp8Linear) else None
    return None if pooled is None else pooled.index


def input_scale_of(module: nn.Module | None) -> torch.Tensor | None:
    """The one scale [1, 1] at which an FP8 linear at one scale per operand takes its input, else None."""
    return module.input_scale if isinstance(module, Fp8Linear) and module.input_norm_bounded else None


def wants_rows(module: nn.Module | None) -> bool:
    """Whether a layer takes its input as QuantizedRows, so that the step producing that input
    should quantize it as it writes it."""
    return isinstance(module, Fp8Linear)
