"""An FP8 GEMM whose epilogue activates and quantizes its own output (CUDA, compute capability
8.9 or newer): the BERT family's up projection and GELU / ReLU written straight as the e4m3
rows the down projection reads, with no bf16 intermediate and no pass of its own.

A row's scale usually needs the row's largest magnitude, which a GEMM tile (a block of its
columns) cannot see. Here the scale is instead a bound known before the GEMM runs: every input
value is at most 448 * its row's scale, so |x_r . w_j + b_j| <= 448 * scale_r * sum_k |w_jk| + |b_j|
(quantized_rows.bounded_scales). The bound sits above the row's true largest value, so the
values use less of e4m3's range than a row-max scale would give them; e4m3 keeps its relative
precision over fifteen binades below its largest value, so what that costs is small
(bench/results/fp8/README.md measures it).

The kernel mirrors its reference, engine/rose/quantization/fp8_fused.py's linear_activation_rows: the
GEMM's output rounded to bf16 as torch._scaled_mm rounds it, activated as the row kernels
activate (triton_fp8_kernels._activate, rounded to the activation dtype), then divided by the
row's bounded scale and rounded to e4m3.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from rose_embed.engine.rose.quantization.quantized_rows import FP8_DTYPE, QuantizedRows, ScaleBound
from rose_embed.engine.rose.quantization.triton_fp8_kernels import ROW_ACTIVATIONS, _activate, _quantized_by


@dataclass(frozen=True)
class GemmLaunch:
    """A tile of block_m x block_n outputs per program, K walked block_k at a time through
    num_stages buffers; programs ordered in groups of group_m row blocks (each group's programs
    share their weight tiles in L2); `tma`: tiles fetched by the copy engine (Hopper and later);
    `persistent` (with `tma`): one program per SM walking the tiles in turn."""

    block_m: int = 128
    block_n: int = 128
    block_k: int = 128
    group_m: int = 8
    num_warps: int = 8
    num_stages: int = 4
    tma: bool = False
    persistent: bool = False  # one program per SM walking the tiles (with TMA)

    def grid(self, num_rows: int, n_cols: int, device: torch.device) -> tuple[int]:
        tiles = triton.cdiv(num_rows, self.block_m) * triton.cdiv(n_cols, self.block_n)
        if self.persistent:
            return (min(tiles, torch.cuda.get_device_properties(device).multi_processor_count),)
        return (tiles,)


@triton.jit
def _tile(tile, num_rows, n_cols, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """Tile number `tile`'s first row and column, row blocks taken GROUP_M at a time."""
    blocks_m = tl.cdiv(num_rows, BLOCK_M)
    blocks_n = tl.cdiv(n_cols, BLOCK_N)
    in_group = GROUP_M * blocks_n
    first_m = (tile // in_group) * GROUP_M
    group_size = tl.minimum(blocks_m - first_m, GROUP_M)
    block_m = first_m + (tile % in_group) % group_size
    block_n = (tile % in_group) // group_size
    return block_m * BLOCK_M, block_n * BLOCK_N


@triton.jit
def _tma_product(a_desc, w_desc, first_row, first_col, k_dim, FAST_ACCUMULATION: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """The tile's float32 products from descriptors of [T, K] and [N, K] (zeros past their ends)."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, k_dim, BLOCK_K):
        a = a_desc.load([first_row, k])
        w = w_desc.load([first_col, k])
        if FAST_ACCUMULATION:
            acc = tl.dot(a, w.T, acc)
        else:  # partial sums promoted to float32 once per block of K
            acc += tl.dot(a, w.T)
    return acc


@triton.jit
def _store_activated(acc, first_row, first_col, a_scale_ptr, w_scale_ptr, bias_ptr, q_ptr, q_scale_ptr, num_rows,
                     n_cols, bound_weight, bound_offset, ACT: tl.constexpr, HAS_BIAS: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The epilogue: the tile's products scaled, biased and rounded to bf16 as torch._scaled_mm
    rounds them, activated, then stored as e4m3 at the rows' bounded scales."""
    rows = first_row + tl.arange(0, BLOCK_M)
    cols = first_col + tl.arange(0, BLOCK_N)
    row_mask = rows < num_rows
    col_mask = cols < n_cols
    a_scale = tl.load(a_scale_ptr + rows, mask=row_mask, other=0.0)
    w_scale = tl.load(w_scale_ptr + cols, mask=col_mask, other=0.0)
    x = acc * a_scale[:, None] * w_scale[None, :]
    if HAS_BIAS:
        x += tl.load(bias_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)[None, :]
    h = _activate(x.to(tl.bfloat16), x, ACT, False)  # the GEMM's bf16 output, activated and rounded as stored
    scale = a_scale * bound_weight + bound_offset  # quantized_rows.bounded_scales
    mask = row_mask[:, None] & col_mask[None, :]
    q = _quantized_by(h, (1.0 / scale)[:, None], q_ptr)
    tl.store(q_ptr + rows[:, None].to(tl.int64) * n_cols + cols[None, :], q, mask=mask)
    # The first column's tiles write the scales (a mask, not a branch: a branch inside the
    # persistent kernel's flattened loops fails Triton's loop fusion).
    tl.store(q_scale_ptr + rows, scale, mask=row_mask & (first_col == 0))


@triton.jit
def _linear_activation_rows_kernel(a_ptr, a_scale_ptr, w_ptr, w_scale_ptr, bias_ptr, q_ptr, q_scale_ptr,
                                   num_rows, n_cols, k_dim, bound_weight, bound_offset,
                                   ACT: tl.constexpr, HAS_BIAS: tl.constexpr, FAST_ACCUMULATION: tl.constexpr,
                                   TMA: tl.constexpr, PERSISTENT: tl.constexpr, BLOCK_M: tl.constexpr,
                                   BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
                                   GROUP_M: tl.constexpr, NUM_STAGES: tl.constexpr):
    if PERSISTENT:
        # One program per SM walks the tiles; the loops flattened into one, so that the pipeline
        # fetches the next tile's first blocks while this tile's epilogue runs. The stages are the
        # loop's own: given to the launch instead, the flattened loop measured slower (bench/results/fp8/README.md).
        tiles = tl.cdiv(num_rows, BLOCK_M) * tl.cdiv(n_cols, BLOCK_N)
        for tile in tl.range(tl.program_id(0), tiles, tl.num_programs(0), flatten=True, num_stages=NUM_STAGES):
            first_row, first_col = _tile(tile, num_rows, n_cols, BLOCK_M, BLOCK_N, GROUP_M)
            acc = _tma_product(a_ptr, w_ptr, first_row, first_col, k_dim, FAST_ACCUMULATION, BLOCK_M, BLOCK_N,
                               BLOCK_K)
            _store_activated(acc, first_row, first_col, a_scale_ptr, w_scale_ptr, bias_ptr, q_ptr, q_scale_ptr,
                             num_rows, n_cols, bound_weight, bound_offset, ACT, HAS_BIAS, BLOCK_M, BLOCK_N)
    else:
        first_row, first_col = _tile(tl.program_id(0), num_rows, n_cols, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        if TMA:  # descriptors of [T, K] and [N, K] in BLOCK_M / BLOCK_N x BLOCK_K blocks, zeros past their ends
            for k in tl.range(0, k_dim, BLOCK_K, num_stages=NUM_STAGES):
                a = a_ptr.load([first_row, k])
                w = w_ptr.load([first_col, k])
                if FAST_ACCUMULATION:
                    acc = tl.dot(a, w.T, acc)
                else:  # partial sums promoted to float32 once per block of K
                    acc += tl.dot(a, w.T)
        else:
            rows = first_row + tl.arange(0, BLOCK_M)
            cols = first_col + tl.arange(0, BLOCK_N)
            ks = tl.arange(0, BLOCK_K)
            a_ptrs = a_ptr + rows[:, None].to(tl.int64) * k_dim + ks[None, :]
            w_ptrs = w_ptr + cols[None, :].to(tl.int64) * k_dim + ks[:, None]  # [BLOCK_K, BLOCK_N]: K-major
            row_mask = rows < num_rows
            col_mask = cols < n_cols
            for k in tl.range(0, k_dim, BLOCK_K, num_stages=NUM_STAGES):
                if EVEN_K:
                    a = tl.load(a_ptrs + k, mask=row_mask[:, None], other=0.0)
                    w = tl.load(w_ptrs + k, mask=col_mask[None, :], other=0.0)
                else:
                    a = tl.load(a_ptrs + k, mask=row_mask[:, None] & (ks[None, :] + k < k_dim), other=0.0)
                    w = tl.load(w_ptrs + k, mask=col_mask[None, :] & (ks[:, None] + k < k_dim), other=0.0)
                if FAST_ACCUMULATION:
                    acc = tl.dot(a, w, acc)
                else:
                    acc += tl.dot(a, w)
        _store_activated(acc, first_row, first_col, a_scale_ptr, w_scale_ptr, bias_ptr, q_ptr, q_scale_ptr,
                         num_rows, n_cols, bound_weight, bound_offset, ACT, HAS_BIAS, BLOCK_M, BLOCK_N)


def default_launch(num_rows: int, n_cols: int, k_dim: int) -> GemmLaunch:
    """Tiles one to a program through plain loads: runs on every GPU with FP8 and every K, and is
    what the GPU tests hold to the reference. bench/probes/fp8_gemm_epilogue.py times the others (on the
    H100 the persistent TMA launch ran fastest, every launch's output checked there)."""
    return GemmLaunch()


def linear_activation_rows(rows: QuantizedRows, weight: torch.Tensor, weight_scale: torch.Tensor,
                           bias: torch.Tensor | None, bound: ScaleBound, activation: str,
                           fast_accumulation: bool = True, launch: GemmLaunch | None = None) -> QuantizedRows:
    """act(rows @ weight.T + bias) [T, N] in bf16, as QuantizedRows at the scales `bound` gives
    (quantized_rows.scale_bound of this weight and bias): rows [T, K] e4m3 with scales [T, 1],
    weight [N, K] e4m3 with weight_scale [1, N]; act one of "gelu", "gelu_tanh", "relu"."""
    num_rows, k_dim = rows.values.shape
    n_cols = weight.shape[0]
    launch = launch or default_launch(num_rows, n_cols, k_dim)
    out = QuantizedRows(torch.empty(num_rows, n_cols, dtype=FP8_DTYPE, device=weight.device),
                        torch.empty(num_rows, 1, dtype=torch.float32, device=weight.device))
    if num_rows == 0:
        return out
    if (launch.tma or launch.persistent) and not all(x.data_ptr() % 16 == 0 for x in (rows.values, weight)):
        launch = GemmLaunch()  # a descriptor needs its base 16-byte aligned
    a_arg, w_arg = rows.values, weight
    if launch.tma or launch.persistent:
        from triton.tools.tensor_descriptor import TensorDescriptor

        a_arg = TensorDescriptor(rows.values, [num_rows, k_dim], [k_dim, 1], [launch.block_m, launch.block_k])
        w_arg = TensorDescriptor(weight, [n_cols, k_dim], [k_dim, 1], [launch.block_n, launch.block_k])
    _linear_activation_rows_kernel[launch.grid(num_rows, n_cols, weight.device)](
        a_arg, rows.scales, w_arg, weight_scale, bias if bias is not None else weight_scale, out.values, out.scales,
        num_rows, n_cols, k_dim, bound.weight, bound.offset, ACT=ROW_ACTIVATIONS[activation],
        HAS_BIAS=bias is not None, FAST_ACCUMULATION=fast_accumulation, TMA=launch.tma or launch.persistent,
        PERSISTENT=launch.persistent, BLOCK_M=launch.block_m, BLOCK_N=launch.block_n, BLOCK_K=launch.block_k,
        EVEN_K=k_dim % launch.block_k == 0, GROUP_M=launch.group_m, NUM_STAGES=launch.num_stages,
        num_warps=launch.num_warps,
    )
    return out

