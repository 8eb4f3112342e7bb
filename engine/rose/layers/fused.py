"""The memory-bound steps between the matmuls: a PyTorch reference for each and, on CUDA,
one fused Triton kernel (engine/rose/layers/triton_kernels.py).

The reference is what runs on the CPU and what defines each step; the Triton kernels must
match it (tests/gpu/test_fused_gpu.py checks them against it). `set_fused_kernels(False)`
(`fused_kernels=False`) keeps CUDA on the references too, for comparison.
"""

from __future__ import annotations

import contextlib
import functools

import torch
import torch.nn.functional as F

from rose_embed.engine.rose.layers.rotary import RotaryBatch, apply_rotary

_enabled = True
_gelu_epilogue = True


def set_fused_kernels(enabled: bool) -> None:
    """Use the Triton kernels on CUDA tensors (default) or the PyTorch references everywhere.
    Takes effect for forwards run afterwards: graphs already captured keep their kernels."""
    global _enabled
    _enabled = enabled


@functools.cache
def _triton_kernels():
    """The kernels module, or None where Triton is missing or broken."""
    try:
        from rose_embed.engine.rose.layers import triton_kernels
    except Exception:  # ImportError, or a Triton without a working backend
        return None
    return triton_kernels


def set_gelu_epilogue(enabled: bool) -> None:
    """Let linear_gelu fold the GELU into its matmul on CUDA (the default: whole BERT-family
    models run faster with it, bench/results/gpu/README.md); False keeps the GELU a pass of its own, for
    comparison. With the fused kernels off it is off too. Takes effect as set_fused_kernels does."""
    global _gelu_epilogue
    _gelu_epilogue = enabled


def gelu_epilogue_enabled() -> bool:
    return _gelu_epilogue


@contextlib.contextmanager
def gelu_epilogue(enabled: bool):
    """set_gelu_epilogue(enabled) inside the block, then the setting it had before."""
    previous = _gelu_epilogue
    set_gelu_epilogue(enabled)
    try:
        yield
    finally:
        set_gelu_epilogue(previous)


def uses_triton(x: torch.Tensor) -> bool:
    return _enabled and x.is_cuda and _triton_kernels() is not None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None,
             weight_offset: float = 0.0) -> torch.Tensor:
    """rms_norm(x) * weight over the last dimension. With a residual, first residual += x in
    place (the pre-norm decoder's residual stream) and normalise the sum. A weight_offset
    scales by (weight_offset + weight) formed in float32, the whole norm in float32 and
    rounded once (Gemma's RMSNorm: x * (1 + weight))."""
    if uses_triton(x) and x.is_contiguous():
        return _triton_kernels().add_rms_norm(x, residual, weight, eps, weight_offset)
    if residual is not None:
        x = residual.add_(x)
    return _rms_norm_reference(x, weight, eps, weight_offset)


def _rms_norm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float, weight_offset: float) -> torch.Tensor:
    if weight_offset:
        return F.rms_norm(x.float(), weight.shape, weight.float() + weight_offset, eps).to(x.dtype)
    return F.rms_norm(x, weight.shape, weight, eps)


def embed_layer_norm(input_ids: torch.Tensor, positions: torch.Tensor, word: torch.Tensor, position: torch.Tensor,
                     token_type: torch.Tensor | None, position_offset: int, weight: torch.Tensor, bias: torch.Tensor,
                     eps: float) -> torch.Tensor:
    """The BERT family's embeddings: layer_norm(word[input_ids] + position[positions + offset]
    (+ the token-type row)), adding in the tables' dtype as nn.Embedding's sums do."""
    if uses_triton(word) and word.is_contiguous() and position.is_contiguous() and bias is not None:
        return _triton_kernels().embed_layer_norm(input_ids, positions, word, position, token_type, position_offset,
                                                  weight, bias, eps)
    x = F.embedding(input_ids, word) + F.embedding(positions + position_offset, position)
    if token_type is not None:
        x = x + token_type
    return F.layer_norm(x, (word.shape[1],), weight, bias, eps)


def add_layer_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                   eps: float) -> torch.Tensor:
    """layer_norm(x + residual): BERT's post-norm after attention and after the MLP."""
    if uses_triton(x) and x.is_contiguous() and residual.is_contiguous():
        return _triton_kernels().add_layer_norm(x, residual, weight, bias, eps)
    return F.layer_norm(x + residual, weight.shape, weight, bias, eps)


def linear_gelu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, approximate: str) -> torch.Tensor:
    """gelu(x @ weight.T + bias) with the erf GELU (approximate "none") or the tanh one ("tanh"):
    the BERT family's up projection and its activation.

    Where set_gelu_epilogue allows, on CUDA this is one cuBLASLt matmul whose epilogue applies
    the GELU to the float32 accumulator before the output's one rounding, instead of a matmul
    that rounds its [T, 4H] output and a GELU pass that reads it back and rounds again.
    cuBLASLt's GELU is the tanh form. Its largest gap to the erf form (5e-4) is far below the
    second rounding it saves in bf16 (a step is 1/128 of the value), so an erf model in bf16
    lands closer to its float32 self than with two passes (tests/gpu/test_fused_gpu.py measures
    both against float32). In fp16 and float32 that gap is as large as the rounding saved, or
    larger, and cuBLASLt does not document its tanh's accuracy: there the GELU stays a pass.
    """
    if (_gelu_epilogue and _enabled and x.is_cuda and x.dtype == torch.bfloat16 and x.dim() == 2
            and bias is not None):
        return torch._addmm_activation(bias, x, weight.t(), use_gelu=True)
    return F.gelu(F.linear(x, weight, bias), approximate=approximate)


_ACTIVATIONS = {
    "silu": F.silu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
}


def act_and_mul(gate_up: torch.Tensor, activation: str = "silu") -> torch.Tensor:
    """[T, 2I] holding gate | up -> act(gate) * up [T, I]: SwiGLU (silu), GeGLU (gelu, gelu_tanh)."""
    if uses_triton(gate_up) and gate_up.is_contiguous():
        return _triton_kernels().act_and_mul(gate_up, activation)
    gate, up = gate_up.chunk(2, dim=-1)
    return _ACTIVATIONS[activation](gate) * up


def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """[T, 2I] holding gate | up -> silu(gate) * up [T, I]."""
    return act_and_mul(gate_up, "silu")


def qk_norm_rope(qkv: torch.Tensor, rope: RotaryBatch, q_weight: torch.Tensor | None, k_weight: torch.Tensor | None,
                 num_heads: int, num_kv_heads: int, head_dim: int, eps: float, weight_offset: float = 0.0
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The attention inputs from a fused projection [T, (H + 2 KV) * D] whose q and k rows
    hold rotary pairs side by side: per-head RMSNorm of q and k (Qwen3, Gemma3 with its
    weight_offset; none where the weights are None: Mistral, ModernBERT), rotary, and v,
    each as a contiguous [T, heads, D]."""
    num_tokens = qkv.shape[0]
    if rope.rotations is None:
        return _triton_kernels().qk_norm_rope(qkv, rope.positions, rope.cos, rope.sin, q_weight, k_weight,
                                              num_heads, num_kv_heads, head_dim, eps, weight_offset)
    q, k, v = qkv.split([num_heads * head_dim, num_kv_heads * head_dim, num_kv_heads * head_dim], dim=-1)
    q, k = q.reshape(num_tokens, num_heads, head_dim), k.reshape(num_tokens, num_kv_heads, head_dim)
    if q_weight is not None:
        q = _rms_norm_reference(q, q_weight, eps, weight_offset)
        k = _rms_norm_reference(k, k_weight, eps, weight_offset)
    return apply_rotary(q, rope.rotations), apply_rotary(k, rope.rotations), v.reshape(
        num_tokens, num_kv_heads, head_dim).contiguous()


def rope_kernel_fits(head_dim: int, x: torch.Tensor) -> bool:
    """Whether qk_norm_rope's Triton kernel serves this shape (its tiles need a power-of-two head_dim)."""
    return uses_triton(x) and head_dim >= 4 and head_dim & (head_dim - 1) == 0


def segment_sums(values: torch.Tensor, index: torch.Tensor, num_rows: int) -> torch.Tensor:
    """values [T, H], index [T] in [0, num_rows) -> [num_rows, H] float32 sums by index: the
    pooling's per-segment sums. On CUDA one Triton pass that reads the activations as they
    are and adds a tile's rows of one segment together before its atomic adds; the
    reference is index_add_ in float32."""
    if uses_triton(values) and values.dim() == 2 and values.stride(1) == 1:
        return _triton_kernels().segment_sums(values, index, num_rows)
    sums = torch.zeros(num_rows, values.shape[1], dtype=torch.float32, device=values.device)
    return sums.index_add_(0, index, values.float())


def segment_maxes_into(maxes: torch.Tensor, values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """maxes [R, H] float32 >= 0, values [T, H], index [T] in [0, R) -> maxes, each row r raised in place to
    the largest value whose index is r, values below 0 counting as 0: SPLADE's max pooling of the relu.
    On CUDA one Triton pass over the values as they are (no float32 copy of them); the reference is
    scatter_reduce_'s amax in float32, whose atomic max on a GPU is a compare-and-swap loop per element."""
    if uses_triton(values) and values.dim() == 2 and values.stride(1) == 1 and maxes.is_contiguous():
        return _triton_kernels().segment_maxes_into(maxes, values, index)
    return maxes.scatter_reduce_(0, index.long()[:, None].expand(-1, values.shape[1]), values.float(), "amax")
