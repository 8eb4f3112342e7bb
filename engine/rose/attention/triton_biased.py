"""Ragged attention with a learned bias per head and relative distance, as one Triton kernel (CUDA).

MPNet adds bias[head, key - query] to every attention score. Neither varlen_attn nor
FlashInfer takes an additive bias, and a padded SDPA with a dense [B, H, L, L] bias would
cost gigabytes at full batches; this kernel is FlashAttention's loop (online softmax over
key blocks, nothing of size L x L in memory) with the bias read from the model's small
[num_heads, 2R + 1] table. It also honours causal masks and (left, right) windows, so a
shape's local layers with a bias stay exact too. Scores and softmax run in float32;
fp32 inputs use exact (IEEE) products, not TF32.

One program per (block of queries, sequence, head); the grid depends only on max_seqlen
and the number of segments, so a CUDA graph that captured it serves every batch of its key.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from rose_embed.engine.rose.attention.online_softmax import online_softmax_step


@triton.jit
def _biased_attention_kernel(q_ptr, k_ptr, v_ptr, out_ptr, cu_ptr, bias_ptr, scale, radius, bias_stride,
                             q_stride, q_head_stride, k_stride, k_head_stride, v_stride, v_head_stride,
                             out_stride, out_head_stride,
                             GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, IS_CAUSAL: tl.constexpr,
                             WINDOW_LEFT: tl.constexpr, WINDOW_RIGHT: tl.constexpr, PRECISION: tl.constexpr):
    block = tl.program_id(0)
    seq = tl.program_id(1)
    head = tl.program_id(2)
    start = tl.load(cu_ptr + seq).to(tl.int64)
    length = tl.load(cu_ptr + seq + 1).to(tl.int64) - start
    first_row = block * BLOCK_M
    if first_row >= length:
        return
    kv_head = head // GROUP
    rows = first_row + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    row_ok = rows < length
    dim_ok = dims < HEAD_DIM
    q = tl.load(q_ptr + (start + rows)[:, None] * q_stride + head * q_head_stride + dims[None, :],
                mask=row_ok[:, None] & dim_ok[None, :], other=0.0)
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    denom = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)

    # Key blocks that can hold an allowed key for this block of queries.
    lo = 0
    hi = length
    if IS_CAUSAL:
        hi = tl.minimum(hi, first_row + BLOCK_M)
    if WINDOW_LEFT >= 0:
        lo = tl.maximum(first_row - WINDOW_LEFT, 0) // BLOCK_N * BLOCK_N
    if WINDOW_RIGHT >= 0:
        hi = tl.minimum(hi, first_row + BLOCK_M + WINDOW_RIGHT)
    for key_start in range(lo, hi, BLOCK_N):
        cols = key_start + tl.arange(0, BLOCK_N)
        col_ok = cols < length
        kv_mask = col_ok[:, None] & dim_ok[None, :]
        k = tl.load(k_ptr + (start + cols)[:, None] * k_stride + kv_head * k_head_stride + dims[None, :],
                    mask=kv_mask, other=0.0)
        v = tl.load(v_ptr + (start + cols)[:, None] * v_stride + kv_head * v_head_stride + dims[None, :],
                    mask=kv_mask, other=0.0)
        scores = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale
        offset = cols[None, :] - rows[:, None]  # key - query
        column = tl.minimum(tl.maximum(offset, -radius), radius) + radius
        scores += tl.load(bias_ptr + head * bias_stride + column).to(tl.float32)
        allowed = col_ok[None, :] & row_ok[:, None]
        if IS_CAUSAL:
            allowed = allowed & (offset <= 0)
        if WINDOW_LEFT >= 0:
            allowed = allowed & (offset >= -WINDOW_LEFT)
        if WINDOW_RIGHT >= 0:
            allowed = allowed & (offset <= WINDOW_RIGHT)
        scores = tl.where(allowed, scores, float("-inf"))
        m, denom, acc = online_softmax_step(scores, v, m, denom, acc, 1.0, PRECISION, False, False)
    out = acc / tl.where(denom > 0, denom, 1.0)[:, None]
    tl.store(out_ptr + (start + rows)[:, None] * out_stride + head * out_head_stride + dims[None, :],
             out.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & dim_ok[None, :])


def varlen_attention_with_bias(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor,
                               max_seqlen: int, table: torch.Tensor, scale: float, is_causal: bool,
                               window: tuple[int, int] | None) -> torch.Tensor:
    """q [T, H, D], k / v [T, KV, D] (any token stride, contiguous head_dim), cu_seqlens [B+1]
    int32, table [H, 2R+1] (column R + d is the bias at key - query = d) -> out [T, H, D]."""
    num_tokens, num_heads, head_dim = q.shape
    out = torch.empty(num_tokens, num_heads, head_dim, dtype=q.dtype, device=q.device)
    num_segments = cu_seqlens.shape[0] - 1
    if num_tokens == 0 or num_segments == 0 or max_seqlen == 0:
        return out
    for x in (q, k, v):
        if x.stride(2) != 1:
            raise ValueError("biased attention needs a contiguous head dimension")
    table = table.contiguous()
    block_d = max(16, triton.next_power_of_2(head_dim))
    block_m, block_n = 64, (64 if block_d <= 64 else 32)
    left, right = window if window is not None else (-1, -1)
    if is_causal:
        right = -1  # the causal mask already bounds the right side
    grid = (triton.cdiv(max_seqlen, block_m), num_segments, num_heads)
    _biased_attention_kernel[grid](
        q, k, v, out, cu_seqlens, table, scale, (table.shape[1] - 1) // 2, table.stride(0),
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), out.stride(0), out.stride(1),
        GROUP=num_heads // k.shape[1], HEAD_DIM=head_dim, BLOCK_D=block_d, BLOCK_M=block_m, BLOCK_N=block_n,
        IS_CAUSAL=is_causal, WINDOW_LEFT=left, WINDOW_RIGHT=right,
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32", num_warps=4,
    )
    return out
