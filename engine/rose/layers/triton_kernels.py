"""Triton kernels for the memory-bound steps between the matmuls (CUDA only).

Each replaces a chain of PyTorch kernels that read and write the activations several
times with one pass: a profile of the Qwen3-0.6B shape on the H200 found these chains
costing more than the matmuls themselves (see bench/results/gpu/README.md). Imported only where CUDA and
Triton are present; `engine/rose/layers/fused.py` chooses between these and the PyTorch
reference, which defines what each kernel must compute.

Rows are tokens: every kernel runs one program per token (the pooling's segment sums, one
per tile of tokens), which keeps the launch grid independent of anything but T, so one
compiled kernel serves every token bucket and every CUDA graph.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _add_rms_norm_kernel(x_ptr, residual_ptr, weight_ptr, out_ptr, n_cols, eps, weight_offset,
                         HAS_RESIDUAL: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        # residual += x, rounded to the activation dtype as the reference's add is.
        x = (x.to(tl.float32) + tl.load(residual_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32))
        x = x.to(residual_ptr.dtype.element_ty)
        tl.store(residual_ptr + row * n_cols + cols, x, mask=mask)
    xf = x.to(tl.float32)
    inv_rms = tl.rsqrt(tl.sum(xf * xf, axis=0) / n_cols + eps)
    w = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32) + weight_offset
    tl.store(out_ptr + row * n_cols + cols, (xf * inv_rms * w).to(out_ptr.dtype.element_ty), mask=mask)


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float,
                 weight_offset: float = 0.0) -> torch.Tensor:
    """rms_norm(residual + x) * (weight_offset + weight); with a residual, it is updated in
    place to residual + x. The scale is formed in float32 (Gemma's 1 + weight)."""
    n_cols = x.shape[-1]
    out = torch.empty_like(x)
    if x.numel() == 0:
        return out
    block = triton.next_power_of_2(n_cols)
    _add_rms_norm_kernel[(x.numel() // n_cols,)](
        x, residual if residual is not None else x, weight, out, n_cols, eps, weight_offset,
        HAS_RESIDUAL=residual is not None, BLOCK=block, num_warps=min(16, max(1, block // 256)),
    )
    return out


@triton.jit
def _add_layer_norm_kernel(x_ptr, residual_ptr, weight_ptr, bias_ptr, out_ptr, n_cols, eps,
                           BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(residual_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    # The reference adds in the activation dtype, then normalises that rounded sum.
    h = (x + r).to(out_ptr.dtype.element_ty).to(tl.float32)
    _store_layer_norm(h, cols, mask, n_cols, eps, weight_ptr, bias_ptr, out_ptr + row * n_cols)


@triton.jit
def _store_layer_norm(h, cols, mask, n_cols, eps, weight_ptr, bias_ptr, out_row_ptr):
    """layer_norm(h) * weight + bias of one row h (float32, zero past n_cols), stored in the
    output's dtype."""
    mean = tl.sum(h, axis=0) / n_cols
    centred = tl.where(mask, h - mean, 0.0)
    inv_std = tl.rsqrt(tl.sum(centred * centred, axis=0) / n_cols + eps)
    w = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(bias_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_row_ptr + cols, (centred * inv_std * w + b).to(out_row_ptr.dtype.element_ty), mask=mask)


def add_layer_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                   eps: float) -> torch.Tensor:
    """layer_norm(x + residual) * weight + bias, as a new tensor (BERT's post-norm)."""
    n_cols = x.shape[-1]
    out = torch.empty_like(x)
    if x.numel() == 0:
        return out
    block = triton.next_power_of_2(n_cols)
    _add_layer_norm_kernel[(x.numel() // n_cols,)](
        x, residual, weight, bias, out, n_cols, eps, BLOCK=block, num_warps=min(16, max(1, block // 256)),
    )
    return out


@triton.jit
def _embed_layer_norm_kernel(ids_ptr, positions_ptr, word_ptr, position_ptr, type_ptr, weight_ptr, bias_ptr, out_ptr,
                             n_cols, position_offset, eps, HAS_TYPE: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    token = tl.load(ids_ptr + row).to(tl.int64)
    position = tl.load(positions_ptr + row).to(tl.int64) + position_offset
    word = tl.load(word_ptr + token * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    where = tl.load(position_ptr + position * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    # The reference adds in the activation dtype, rounding after each add, then normalises.
    h = (word + where).to(out_ptr.dtype.element_ty).to(tl.float32)
    if HAS_TYPE:
        h = (h + tl.load(type_ptr + cols, mask=mask, other=0.0).to(tl.float32)).to(out_ptr.dtype.element_ty)
        h = h.to(tl.float32)
    _store_layer_norm(h, cols, mask, n_cols, eps, weight_ptr, bias_ptr, out_ptr + row * n_cols)


def embed_layer_norm(input_ids: torch.Tensor, positions: torch.Tensor, word: torch.Tensor, position: torch.Tensor,
                     token_type: torch.Tensor | None, position_offset: int, weight: torch.Tensor, bias: torch.Tensor,
                     eps: float) -> torch.Tensor:
    """layer_norm(word[ids] + position[positions + offset] (+ token_type)) * weight + bias -> [T, H]
    in the tables' dtype: the BERT family's embeddings in one pass."""
    n_cols = word.shape[1]
    out = torch.empty(input_ids.shape[0], n_cols, dtype=word.dtype, device=word.device)
    if input_ids.numel() == 0:
        return out
    block = triton.next_power_of_2(n_cols)
    _embed_layer_norm_kernel[(input_ids.shape[0],)](
        input_ids, positions, word, position, token_type if token_type is not None else word, weight, bias, out,
        n_cols, position_offset, eps, HAS_TYPE=token_type is not None, BLOCK=block,
        num_warps=min(16, max(1, block // 256)),
    )
    return out


ACTIVATIONS = {"silu": 0, "gelu": 1, "gelu_tanh": 2}


@triton.jit
def _act_and_mul_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr, ACT: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    start = tl.program_id(1) * BLOCK
    cols = start + tl.arange(0, BLOCK)
    mask = cols < n_cols
    gate = tl.load(x_ptr + row * 2 * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * 2 * n_cols + n_cols + cols, mask=mask, other=0.0)
    # The reference rounds act(gate) to the activation dtype before the multiply.
    if ACT == 0:
        act = gate * tl.sigmoid(gate)
    elif ACT == 1:
        act = 0.5 * gate * (1.0 + tl.erf(gate * 0.7071067811865476))
    else:  # tanh(y) = 2 sigmoid(2y) - 1
        inner = 0.7978845608028654 * (gate + 0.044715 * gate * gate * gate)
        act = 0.5 * gate * (2.0 * tl.sigmoid(2.0 * inner))
    act = act.to(out_ptr.dtype.element_ty)
    tl.store(out_ptr + row * n_cols + cols, (act.to(tl.float32) * up.to(tl.float32)).to(out_ptr.dtype.element_ty),
             mask=mask)


def act_and_mul(gate_up: torch.Tensor, activation: str = "silu") -> torch.Tensor:
    """[T, 2I] (gate | up) -> act(gate) * up, [T, I]; act one of ACTIVATIONS."""
    num_tokens, n_cols = gate_up.shape[0], gate_up.shape[1] // 2
    out = torch.empty(num_tokens, n_cols, dtype=gate_up.dtype, device=gate_up.device)
    if num_tokens == 0:
        return out
    block = 1024
    _act_and_mul_kernel[(num_tokens, triton.cdiv(n_cols, block))](
        gate_up, out, n_cols, BLOCK=block, ACT=ACTIVATIONS[activation], num_warps=4)
    return out


@triton.jit
def _norm_rope_heads(src, weight_ptr, dst, cos, sin, eps, weight_offset,
                     HEADS: tl.constexpr, BLOCK: tl.constexpr, HALF: tl.constexpr, HEAD_DIM: tl.constexpr,
                     HAS_NORM: tl.constexpr):
    # HEADS heads of one token: RMS-normalised over head_dim, scaled, rotated pair by pair
    # (without HAS_NORM only rotated). Whole heads are loaded and stored contiguously; the
    # pairs (2j, 2j + 1) are split in registers (strided loads of the even and odd halves
    # ran at a fifth of the bandwidth).
    h = tl.arange(0, BLOCK)[:, None]
    d = tl.arange(0, HEAD_DIM)[None, :]
    mask = (h < HEADS) & (d < HEAD_DIM)
    x = tl.load(src + h * HEAD_DIM + d, mask=mask, other=0.0).to(tl.float32)
    if HAS_NORM:
        inv_rms = tl.rsqrt(tl.sum(x * x, axis=1) / HEAD_DIM + eps)[:, None]
        w = tl.load(weight_ptr + d).to(tl.float32) + weight_offset
        # Round the normalised head to the activation dtype, as the reference's norm output is.
        x = (x * inv_rms * w).to(dst.dtype.element_ty).to(tl.float32)
    even, odd = tl.split(tl.reshape(x, (BLOCK, HALF, 2)))
    rotated = tl.join(even * cos - odd * sin, even * sin + odd * cos)
    tl.store(dst + h * HEAD_DIM + d, tl.reshape(rotated, (BLOCK, HEAD_DIM)).to(dst.dtype.element_ty), mask=mask)


@triton.jit
def _qk_norm_rope_kernel(qkv_ptr, positions_ptr, cos_ptr, sin_ptr, q_weight_ptr, k_weight_ptr,
                         q_out_ptr, k_out_ptr, v_out_ptr, eps, weight_offset,
                         NUM_Q_HEADS: tl.constexpr, NUM_KV_HEADS: tl.constexpr, HALF: tl.constexpr,
                         HEAD_DIM: tl.constexpr, Q_BLOCK: tl.constexpr, KV_BLOCK: tl.constexpr,
                         HAS_NORM: tl.constexpr):
    # One token: q heads then k heads normalised and rotated; v heads copied out.
    token = tl.program_id(0).to(tl.int64)
    row = qkv_ptr + token * (NUM_Q_HEADS + 2 * NUM_KV_HEADS) * HEAD_DIM
    pos = tl.load(positions_ptr + token).to(tl.int64)
    j = tl.arange(0, HALF)
    cos = tl.load(cos_ptr + pos * HALF + j).to(tl.float32)[None, :]
    sin = tl.load(sin_ptr + pos * HALF + j).to(tl.float32)[None, :]
    _norm_rope_heads(row, q_weight_ptr, q_out_ptr + token * NUM_Q_HEADS * HEAD_DIM, cos, sin, eps, weight_offset,
                     NUM_Q_HEADS, Q_BLOCK, HALF, HEAD_DIM, HAS_NORM)
    _norm_rope_heads(row + NUM_Q_HEADS * HEAD_DIM, k_weight_ptr, k_out_ptr + token * NUM_KV_HEADS * HEAD_DIM,
                     cos, sin, eps, weight_offset, NUM_KV_HEADS, KV_BLOCK, HALF, HEAD_DIM, HAS_NORM)
    cols = tl.arange(0, KV_BLOCK * HEAD_DIM)
    mask = cols < NUM_KV_HEADS * HEAD_DIM
    v = tl.load(row + (NUM_Q_HEADS + NUM_KV_HEADS) * HEAD_DIM + cols, mask=mask)
    tl.store(v_out_ptr + token * NUM_KV_HEADS * HEAD_DIM + cols, v, mask=mask)


def qk_norm_rope(qkv: torch.Tensor, positions: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                 q_weight: torch.Tensor | None, k_weight: torch.Tensor | None, num_heads: int, num_kv_heads: int,
                 head_dim: int, eps: float, weight_offset: float = 0.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fused q/k RMSNorm + rotary + v split of a Qwen3 qkv projection [T, (H + 2 KV) * D]
    with interleaved rotary pairs -> contiguous q [T, H, D], k [T, KV, D], v [T, KV, D].
    cos / sin are the [P, D/2] tables, indexed by positions [T]. Without weights (None),
    rotary only: the models whose q and k have no norm."""
    num_tokens = qkv.shape[0]
    q = torch.empty(num_tokens, num_heads, head_dim, dtype=qkv.dtype, device=qkv.device)
    k = torch.empty(num_tokens, num_kv_heads, head_dim, dtype=qkv.dtype, device=qkv.device)
    v = torch.empty(num_tokens, num_kv_heads, head_dim, dtype=qkv.dtype, device=qkv.device)
    if num_tokens == 0:
        return q, k, v
    has_norm = q_weight is not None
    _qk_norm_rope_kernel[(num_tokens,)](
        qkv, positions, cos, sin, q_weight if has_norm else cos, k_weight if has_norm else cos, q, k, v, eps,
        weight_offset, NUM_Q_HEADS=num_heads, NUM_KV_HEADS=num_kv_heads, HALF=head_dim // 2, HEAD_DIM=head_dim,
        Q_BLOCK=triton.next_power_of_2(num_heads), KV_BLOCK=triton.next_power_of_2(num_kv_heads), HAS_NORM=has_norm,
        num_warps=4,
    )
    return q, k, v


@triton.jit
def _tile_reduce(x, IS_MAX: tl.constexpr):
    if IS_MAX:
        reduced = tl.max(x, axis=0)
    else:
        reduced = tl.sum(x, axis=0)
    return reduced


@triton.jit
def _atomic_combine(ptrs, values, mask, IS_MAX: tl.constexpr):
    if IS_MAX:
        tl.atomic_max(ptrs, values, mask=mask)
    else:
        tl.atomic_add(ptrs, values, mask=mask)


@triton.jit
def _segment_reduce_kernel(x_ptr, index_ptr, out_ptr, num_tokens, n_cols, x_stride,
                           IS_MAX: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr):
    # A tile of BLOCK_T tokens by BLOCK_H columns. Segments are runs of tokens, so a tile's
    # first and last rows name the segments most of its rows belong to: those rows are
    # reduced in the tile and combined with one atomic row each; any other row (a segment
    # wholly inside the tile) is combined row by row. Any index is reduced right; runs are only
    # what makes it fast. The first and last rows may name one segment with others between
    # them (tokens no segment reads sit at both ends of a text), so the test for other rows
    # looks at every row. Sums add in float32; maxes start from 0 and every value is floored at 0
    # (SPLADE's relu), so float32's atomic max, which orders non-negative floats as integers, is
    # exact and order-free.
    tile = tl.program_id(0)
    rows = tile * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    row_ok = rows < num_tokens
    col_ok = cols < n_cols
    index = tl.load(index_ptr + rows, mask=row_ok, other=0).to(tl.int64)
    x = tl.load(x_ptr + rows.to(tl.int64)[:, None] * x_stride + cols[None, :],
                mask=row_ok[:, None] & col_ok[None, :], other=0.0).to(tl.float32)
    if IS_MAX:
        x = tl.maximum(x, 0.0)
    first = tl.load(index_ptr + tile * BLOCK_T).to(tl.int64)
    last = tl.load(index_ptr + tl.minimum(tile * BLOCK_T + BLOCK_T, num_tokens) - 1).to(tl.int64)
    in_first = row_ok & (index == first)
    _atomic_combine(out_ptr + first * n_cols + cols, _tile_reduce(tl.where(in_first[:, None], x, 0.0), IS_MAX),
                    col_ok, IS_MAX)
    others = row_ok & ~in_first
    if tl.max(others.to(tl.int32), axis=0) > 0:
        in_last = others & (index == last)
        _atomic_combine(out_ptr + last * n_cols + cols, _tile_reduce(tl.where(in_last[:, None], x, 0.0), IS_MAX),
                        col_ok, IS_MAX)
        inside = others & ~in_last
        _atomic_combine(out_ptr + index[:, None] * n_cols + cols[None, :], x, inside[:, None] & col_ok[None, :],
                        IS_MAX)


def _segment_reduce_into(out: torch.Tensor, values: torch.Tensor, index: torch.Tensor, is_max: bool) -> torch.Tensor:
    num_tokens, n_cols = values.shape
    if num_tokens == 0:
        return out
    block_h = min(128, max(16, triton.next_power_of_2(n_cols)))
    block_t = 64
    _segment_reduce_kernel[(triton.cdiv(num_tokens, block_t), triton.cdiv(n_cols, block_h))](
        values, index, out, num_tokens, n_cols, values.stride(0), IS_MAX=is_max, BLOCK_T=block_t, BLOCK_H=block_h,
        num_warps=4,
    )
    return out


def segment_sums(values: torch.Tensor, index: torch.Tensor, num_rows: int) -> torch.Tensor:
    """values [T, H] (any float dtype, unit column stride), index [T] in [0, num_rows) ->
    [num_rows, H] float32: row r the sum of the values whose index is r (float32 atomic adds:
    their order, and so the last bits, may vary from run to run, as index_add_'s do)."""
    sums = torch.zeros(num_rows, values.shape[1], dtype=torch.float32, device=values.device)
    return _segment_reduce_into(sums, values, index, is_max=False)


def segment_maxes_into(maxes: torch.Tensor, values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """maxes [R, H] float32, all >= 0 (contiguous), values [T, H] (any float dtype, unit column stride),
    index [T] in [0, R): each maxes[r] raised in place to the largest of the values whose index is r
    (values below 0 count as 0). Exact: a max does not depend on the order it is taken in."""
    return _segment_reduce_into(maxes, values, index, is_max=True)
