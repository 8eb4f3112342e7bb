"""Attention over a packed stream in query tiles cut from the stream itself, not per sequence (Triton).

FlashAttention's varlen kernels give every sequence at least one query tile of 128 rows
per head: a batch of 512 queries of 20 tokens launches 512 mostly empty tiles per head,
and on short texts that costs more than the attention itself. Here the stream's rows are
cut into tiles of BLOCK_M in order, so one tile holds several short sequences (or one
piece of a long one). A tile's keys run from the start of its first row's sequence to
the end of its last row's, and a block-diagonal mask keeps every query inside its own
sequence (and, for decoder models, at or before itself).

The work per tile is BLOCK_M rows times that key range: for short sequences a little more
than BLOCK_M keys, for a tile inside one long sequence that sequence's length, as with
FlashAttention. A tile that straddles two long sequences reads both, which is why the
engine times this against varlen per bucket rather than always using it (engine/rose/attention/choice.py).

Each row needs the bounds of its sequence: two int32 arrays [T] (`sequence_bounds`), made
on the device from cu_seqlens with no host sync, so a CUDA graph captures them too.
Scores and softmax in float32 (exp2 with the scale folded in), fp32 inputs with IEEE
products; GQA by reading the query head's key/value head. Sliding windows and additive
position bias are not handled: the backend refuses such shapes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from rose_embed.engine.rose.attention.online_softmax import online_softmax_step

_LOG2_E = 1.4426950408889634


@triton.jit
def _same_sequence_only(scores, cols, rows, row_start, row_end, IS_CAUSAL: tl.constexpr):
    """The block-diagonal mask: each row's scores outside its own sequence (and, for decoder
    models, past itself) become -inf; it also bounds the keys by the tile's `hi`."""
    allowed = (cols[None, :] >= row_start[:, None]) & (cols[None, :] < row_end[:, None])
    if IS_CAUSAL:
        allowed = allowed & (cols[None, :] <= rows[:, None])
    return tl.where(allowed, scores, float("-inf"))


@triton.jit
def _packed_attention_kernel(q_ptr, k_ptr, v_ptr, out_ptr, seq_start_ptr, seq_end_ptr, num_tokens, qk_scale,
                             q_stride, q_head_stride, k_stride, k_head_stride, v_stride, v_head_stride,
                             out_stride, out_head_stride,
                             GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, IS_CAUSAL: tl.constexpr,
                             PRECISION: tl.constexpr, MASK_INNER_BLOCKS: tl.constexpr,
                             HEADS_PER_TILE: tl.constexpr, FOLD_SCALE: tl.constexpr,
                             TMA_LOADS: tl.constexpr):
    tile = tl.program_id(0)
    first = tile * BLOCK_M
    last = tl.minimum(first + BLOCK_M, num_tokens) - 1
    if HEADS_PER_TILE == 1:
        heads = tl.program_id(1)
        kv_head = heads // GROUP
        rows = first + tl.arange(0, BLOCK_M)
    else:
        # The tile's tokens once per query head of one key/value head, stacked: one MMA for all
        # of them, and the key/value blocks read once.
        kv_head = tl.program_id(1)
        stacked = tl.arange(0, HEADS_PER_TILE * BLOCK_M)
        heads = kv_head * GROUP + stacked // BLOCK_M
        rows = first + stacked % BLOCK_M
    row_ok = rows < num_tokens
    dims = tl.arange(0, BLOCK_D)
    dim_ok = dims < HEAD_DIM
    # Rows past the stream get the empty range [0, 0): no key is allowed for them.
    row_start = tl.load(seq_start_ptr + rows, mask=row_ok, other=0)
    row_end = tl.load(seq_end_ptr + rows, mask=row_ok, other=0)
    lo = tl.load(seq_start_ptr + first)
    hi = tl.load(seq_end_ptr + last)
    if IS_CAUSAL:
        hi = tl.minimum(hi, last + 1)
    if not MASK_INNER_BLOCKS:
        # Keys every row of the tile may see: a key block inside [inner_lo, inner_hi) needs no mask.
        inner_lo = tl.max(tl.where(row_ok, row_start, lo))
        inner_hi = tl.min(tl.where(row_ok, row_end, hi))
        if IS_CAUSAL:
            inner_hi = tl.minimum(inner_hi, first + 1)
    rows64 = rows.to(tl.int64)
    q_rows = rows64 * q_stride + heads * q_head_stride
    q = tl.load(q_ptr + q_rows[:, None] + dims[None, :], mask=row_ok[:, None] & dim_ok[None, :], other=0.0)
    m = tl.full([HEADS_PER_TILE * BLOCK_M], float("-inf"), tl.float32)
    denom = tl.zeros([HEADS_PER_TILE * BLOCK_M], tl.float32)
    acc = tl.zeros([HEADS_PER_TILE * BLOCK_M, BLOCK_D], tl.float32)
    for key_start in range(lo, hi, BLOCK_N):
        cols = key_start + tl.arange(0, BLOCK_N)
        if TMA_LOADS:
            # k_ptr and v_ptr are descriptors of [T, KV * HEAD_DIM]: the copy engine fetches the
            # block, with no address per element; keys past `hi` are read but the mask drops
            # them, and rows past the stream come back as zeros.
            k = k_ptr.load([key_start, kv_head * HEAD_DIM])
            v = v_ptr.load([key_start, kv_head * HEAD_DIM])
        else:
            cols64 = cols.to(tl.int64)
            kv_mask = (cols < hi)[:, None] & dim_ok[None, :]
            k = tl.load(k_ptr + cols64[:, None] * k_stride + kv_head * k_head_stride + dims[None, :],
                        mask=kv_mask, other=0.0)
            v = tl.load(v_ptr + cols64[:, None] * v_stride + kv_head * v_head_stride + dims[None, :],
                        mask=kv_mask, other=0.0)
        scores = tl.dot(q, tl.trans(k), input_precision=PRECISION)
        if not FOLD_SCALE:  # folded, the scale goes into the exponent's FMA instead
            scores = scores * qk_scale
        if MASK_INNER_BLOCKS:
            scores = _same_sequence_only(scores, cols, rows, row_start, row_end, IS_CAUSAL)
        elif (key_start < inner_lo) | (key_start + BLOCK_N > inner_hi):
            scores = _same_sequence_only(scores, cols, rows, row_start, row_end, IS_CAUSAL)
        m, denom, acc = online_softmax_step(scores, v, m, denom, acc, qk_scale, PRECISION, True, FOLD_SCALE)
    out = acc / tl.where(denom > 0, denom, 1.0)[:, None]
    out_rows = rows64 * out_stride + heads * out_head_stride
    tl.store(out_ptr + out_rows[:, None] + dims[None, :], out.to(out_ptr.dtype.element_ty),
             mask=row_ok[:, None] & dim_ok[None, :])


def sequence_bounds(cu_seqlens: torch.Tensor, num_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per token: (start, end) int32 [T] of the sequence holding it, from cu_seqlens [B+1].

    On the device and without reading anything back, so that a CUDA graph captures it.
    Empty segments (cu_seqlens repeats a value) hold no token: `right=True` finds, for
    token t, the last segment starting at or before t, which is the non-empty one."""
    tokens = torch.arange(num_tokens, dtype=cu_seqlens.dtype, device=cu_seqlens.device)
    seq = torch.searchsorted(cu_seqlens, tokens, right=True, out_int32=True) - 1
    return cu_seqlens[seq].to(torch.int32), cu_seqlens[seq + 1].to(torch.int32)


@dataclass(frozen=True)
class Tiles:
    """How the kernel is launched: `block_m` query rows per tile and `block_n` keys per step,
    Triton's warps and pipeline stages (None: 4 warps for up to 64 rows, else 8; Triton's own
    stages), whether key blocks that every row of the tile may see are masked all the same
    (the mask is then a no-op; skipping it saves its compares), and whether a tile serves every
    query head of one key/value head (GQA with a power-of-two group: the key/value blocks are
    read once for the group, in an MMA of group x block_m rows), whether the softmax's scale
    goes into the exponent's FMA (one float32 multiply per score less), and a cap on the
    registers per thread (Triton's `maxnreg`; None: the compiler's count), which decides how
    many tiles an SM holds at once where registers, not shared memory, run out first, and
    whether key/value blocks come through the copy engine (TMA descriptors, Hopper and later;
    no address arithmetic per element; used where the head_dim is a power of two and the
    tensors are 16-byte aligned, else plain loads)."""

    block_m: int
    block_n: int
    num_warps: int | None = None
    num_stages: int | None = None
    mask_inner_blocks: bool = True
    share_kv_heads: bool = False
    fold_scale: bool = False
    max_registers: int | None = None
    tma_loads: bool = False


def default_tiles(head_dim: int, group: int = 1) -> Tiles:
    """The fastest setting per shape in bench/probes/attention_tiles.py's sweep on the H200, where it
    led on the classes that carry most tokens (bench/gpu_bench.py's attention table times the
    backends per model). 64-row tiles (one warpgroup's MMA) waste little on short texts.
    Heads of 64 skip the mask on key blocks every row may see: that pays on long texts and
    costs little on short ones, while at head_dim 32 the check cost more than the mask.
    Wider heads take 32-key blocks, which keep the accumulator in registers; with GQA groups
    of two, 32-row tiles stacked per key/value head fill the same 64-row MMA and read each
    key/value block once for both query heads. Every shape loads key/value blocks through
    TMA where it can: the kernel is bound by the instructions it issues, and the copy engine
    takes the per-element address arithmetic off the warps."""
    if head_dim <= 32:
        return Tiles(64, 64, tma_loads=True)
    if head_dim <= 64:
        return Tiles(64, 64, mask_inner_blocks=False, tma_loads=True)
    if group == 2:
        return Tiles(32, 32, num_warps=4, num_stages=3, share_kv_heads=True, tma_loads=True)
    return Tiles(64, 32, tma_loads=True)


def packed_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seq_start: torch.Tensor,
                     seq_end: torch.Tensor, scale: float, is_causal: bool, tiles: Tiles | None = None) -> torch.Tensor:
    """q [T, H, D], k / v [T, KV, D] (any token stride, contiguous head_dim), the per-token
    sequence bounds from `sequence_bounds` -> out [T, H, D] in q's dtype."""
    num_tokens, num_heads, head_dim = q.shape
    out = torch.empty(num_tokens, num_heads, head_dim, dtype=q.dtype, device=q.device)
    if num_tokens == 0:
        return out
    for x in (q, k, v):
        if x.stride(2) != 1:
            raise ValueError("packed attention needs a contiguous head dimension")
    group = num_heads // k.shape[1]
    tiles = tiles or default_tiles(head_dim, group)
    block_m, block_n = tiles.block_m, tiles.block_n
    heads_per_tile = group if tiles.share_kv_heads and group & (group - 1) == 0 else 1
    grid = (triton.cdiv(num_tokens, block_m), num_heads // heads_per_tile)
    block_d = max(16, triton.next_power_of_2(head_dim))
    tma = tiles.tma_loads and block_d == head_dim and all(_tma_ready(x) for x in (k, v))
    k_arg, v_arg = (_block_descriptor(x, block_n) for x in (k, v)) if tma else (k, v)
    _packed_attention_kernel[grid](
        q, k_arg, v_arg, out, seq_start, seq_end, num_tokens, scale * _LOG2_E,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), out.stride(0), out.stride(1),
        GROUP=group, HEAD_DIM=head_dim, BLOCK_D=block_d,
        BLOCK_M=block_m, BLOCK_N=block_n, IS_CAUSAL=is_causal,
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32", MASK_INNER_BLOCKS=tiles.mask_inner_blocks,
        HEADS_PER_TILE=heads_per_tile, FOLD_SCALE=tiles.fold_scale, TMA_LOADS=tma,
        num_warps=tiles.num_warps or (4 if heads_per_tile * block_m <= 64 else 8),
        **({} if tiles.num_stages is None else {"num_stages": tiles.num_stages}),
        **({} if tiles.max_registers is None else {"maxnreg": tiles.max_registers}),
    )
    return out


def _tma_ready(x: torch.Tensor) -> bool:
    """A Triton with host-side descriptors, a GPU with TMA (Hopper and later), heads side by
    side in each token's row, and the addresses a descriptor needs aligned."""
    return (x.is_cuda and _has_tensor_descriptors() and torch.cuda.get_device_capability(x.device)[0] >= 9
            and x.stride(1) == x.shape[2] and x.data_ptr() % 16 == 0 and (x.stride(0) * x.element_size()) % 16 == 0)


@functools.cache
def _has_tensor_descriptors() -> bool:
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: F401
    except ImportError:  # Tritons before 3.3 (torch 2.6): plain loads
        return False
    return True


def _block_descriptor(x: torch.Tensor, block_n: int):
    """x [T, KV, D] as a [T, KV * D] matrix read in blocks of block_n tokens by one head."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    num_tokens, heads, head_dim = x.shape
    return TensorDescriptor(x, [num_tokens, heads * head_dim], [x.stride(0), 1], [block_n, head_dim])
