"""Triton kernels that write FP8 activations (CUDA, compute capability 8.9 or newer): the fused
steps of engine/rose/layers/triton_kernels.py that also, or instead, write their output as e4m3
rows with one float32 scale per row, for the FP8 GEMM that reads it (engine/rose/quantization/fp8.py).

Quantizing inside the kernel that produces an activation costs one more byte written per value
in a pass that runs anyway; a pass of its own reads the activation back and writes it again,
which costs more than the FP8 GEMM saves (bench/results/fp8/README.md). A row's scale needs the row's largest
magnitude: the norms hold their row in registers already (one program per token, as in
triton_kernels.py); the MLP's activations, rows as long as the intermediate size, are held
whole too where they fit (up to _WHOLE_ROW_MAX columns: read and activated once), else walked
twice in chunks, first for the largest magnitude, then to quantize (the second read mostly hits
the cache, though holding the row whole measured faster).

Each kernel mirrors its reference in engine/rose/quantization/fp8_fused.py: the bf16 step, its
output rounded to the activation dtype where the reference rounds it, then quantized as
quantized_rows.quantize_rows_reference does (scale = max(max|row|, 1e-12) / 448, value = row / scale
rounded to nearest even). Rows are tokens, so the grid depends on T alone and one compiled
kernel serves every token bucket and every CUDA graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from rose_embed.engine.rose.quantization.quantized_rows import FP8_DTYPE, QuantizedRows, ScaleBound
from rose_embed.engine.rose.layers.triton_kernels import ACTIVATIONS

ROW_ACTIVATIONS = {**ACTIVATIONS, "relu": 3}
_IDENTITY = tl.constexpr(5)  # no activation: quantize_rows runs the activation kernel with it
_CHUNK = 1024  # columns per step of the two-pass kernels
# Rows up to this many columns are held whole by one program (read once); longer ones are walked
# twice in chunks. Past it a thread would hold more values than its registers.
_WHOLE_ROW_MAX = 16384
# Most activated values a thread holds of a row held whole: past it they spill from registers;
# below it, more warps only add reduction steps (bench/probes/fp8_row_kernels.py times other counts).
_VALUES_PER_THREAD = 96


@triton.jit
def _scale_of(amax):
    # quantized_rows.MIN_AMAX and FP8_MAX: a zero row gets a positive scale and quantizes to zeros.
    return tl.maximum(amax, 1e-12) / 448.0


@triton.jit
def _quantized(h, scale, q_ptr):
    """h / scale within e4m3's finite range, in the e4m3 dtype q_ptr points to."""
    q = h / scale
    return tl.minimum(tl.maximum(q, -448.0), 448.0).to(q_ptr.dtype.element_ty)


@triton.jit
def _quantized_by(h, inverse_scale, q_ptr):
    """h * inverse_scale within e4m3's finite range, in q_ptr's e4m3 dtype: for elementwise kernels,
    where a division per value would cost more than the memory traffic (the product may differ from
    the quotient in float32's last bit, which moves a value to the neighbouring e4m3 value only
    where it sits on a rounding boundary)."""
    q = h * inverse_scale
    return tl.minimum(tl.maximum(q, -448.0), 448.0).to(q_ptr.dtype.element_ty)


@triton.jit
def _store_row(h, cols, mask, q_row_ptr, scale_ptr):
    """One row h (float32, zero where masked) held whole: its e4m3 values and its scale."""
    scale = _scale_of(tl.max(tl.abs(h), axis=0))
    tl.store(q_row_ptr + cols, _quantized(h, scale, q_row_ptr), mask=mask)
    tl.store(scale_ptr, scale)


@triton.jit
def _store_quantized(h, scale, rows, cols, mask, n_cols, q_ptr):
    """Columns `cols` of ROWS rows h [ROWS, BLOCK] as e4m3 values at their rows' scales [ROWS]."""
    tl.store(q_ptr + rows[:, None] * n_cols + cols[None, :], _quantized(h, scale[:, None], q_ptr), mask=mask)


@triton.jit
def _layer_norm_row(h, cols, mask, n_cols, eps, weight_ptr, bias_ptr):
    """layer_norm(h) * weight + bias of one row h (float32, zero past n_cols), float32, zero past n_cols."""
    mean = tl.sum(h, axis=0) / n_cols
    centred = tl.where(mask, h - mean, 0.0)
    inv_std = tl.rsqrt(tl.sum(centred * centred, axis=0) / n_cols + eps)
    w = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(bias_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    return centred * inv_std * w + b


@triton.jit
def _add_layer_norm_rows_kernel(x_ptr, residual_ptr, weight_ptr, bias_ptr, out_ptr, q_ptr, scale_ptr, n_cols, eps,
                                ONE_SCALE: tl.constexpr, BLOCK: tl.constexpr):
    # ONE_SCALE: scale_ptr holds the one scale to quantize at, read; else each row's scale, written.
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(residual_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    # The reference adds in the activation dtype, then normalises that rounded sum.
    h = (x + r).to(out_ptr.dtype.element_ty).to(tl.float32)
    y = _layer_norm_row(h, cols, mask, n_cols, eps, weight_ptr, bias_ptr).to(out_ptr.dtype.element_ty)
    tl.store(out_ptr + row * n_cols + cols, y, mask=mask)
    if ONE_SCALE:
        tl.store(q_ptr + row * n_cols + cols, _quantized(y.to(tl.float32), tl.load(scale_ptr), q_ptr), mask=mask)
    else:
        _store_row(y.to(tl.float32), cols, mask, q_ptr + row * n_cols, scale_ptr + row)


def add_layer_norm_rows(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                        eps: float, scale: torch.Tensor | None = None) -> tuple[torch.Tensor, QuantizedRows]:
    """layer_norm(x + residual) * weight + bias [T, H] as a new tensor, and as QuantizedRows: a
    scale per row, or the one `scale` [1, 1] (float32, on the device) given."""
    n_cols = x.shape[-1]
    num_rows = x.numel() // n_cols
    out = torch.empty_like(x)
    if scale is None:
        rows = _empty_rows(num_rows, n_cols, x.device)
    else:
        rows = QuantizedRows(torch.empty(num_rows, n_cols, dtype=FP8_DTYPE, device=x.device), scale)
    if num_rows == 0:
        return out, rows
    block = triton.next_power_of_2(n_cols)
    _add_layer_norm_rows_kernel[(num_rows,)](
        x, residual, weight, bias, out, rows.values, rows.scales, n_cols, eps, ONE_SCALE=scale is not None,
        BLOCK=block, num_warps=min(16, max(1, block // 256)),
    )
    return out, rows


@triton.jit
def _embed_layer_norm_rows_kernel(ids_ptr, positions_ptr, word_ptr, position_ptr, type_ptr, weight_ptr, bias_ptr,
                                  out_ptr, q_ptr, scale_ptr, n_cols, position_offset, eps, HAS_TYPE: tl.constexpr,
                                  BLOCK: tl.constexpr):
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
    y = _layer_norm_row(h, cols, mask, n_cols, eps, weight_ptr, bias_ptr).to(out_ptr.dtype.element_ty)
    tl.store(out_ptr + row * n_cols + cols, y, mask=mask)
    _store_row(y.to(tl.float32), cols, mask, q_ptr + row * n_cols, scale_ptr + row)


def embed_layer_norm_rows(input_ids: torch.Tensor, positions: torch.Tensor, word: torch.Tensor, position: torch.Tensor,
                          token_type: torch.Tensor | None, position_offset: int, weight: torch.Tensor,
                          bias: torch.Tensor, eps: float) -> tuple[torch.Tensor, QuantizedRows]:
    """triton_kernels.embed_layer_norm's [T, H] in the tables' dtype, and as QuantizedRows."""
    n_cols = word.shape[1]
    num_rows = input_ids.shape[0]
    out = torch.empty(num_rows, n_cols, dtype=word.dtype, device=word.device)
    rows = _empty_rows(num_rows, n_cols, word.device)
    if num_rows == 0:
        return out, rows
    block = triton.next_power_of_2(n_cols)
    _embed_layer_norm_rows_kernel[(num_rows,)](
        input_ids, positions, word, position, token_type if token_type is not None else word, weight, bias, out,
        rows.values, rows.scales, n_cols, position_offset, eps, HAS_TYPE=token_type is not None, BLOCK=block,
        num_warps=min(16, max(1, block // 256)),
    )
    return out, rows


@triton.jit
def _add_rms_norm_rows_kernel(x_ptr, residual_ptr, weight_ptr, q_ptr, scale_ptr, n_cols, eps,
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
    w = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    # The reference's norm output stands in the activation dtype before it is quantized.
    y = (xf * inv_rms * w).to(x_ptr.dtype.element_ty).to(tl.float32)
    _store_row(y, cols, mask, q_ptr + row * n_cols, scale_ptr + row)


def add_rms_norm_rows(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor,
                      eps: float) -> QuantizedRows:
    """rms_norm(residual + x) * weight as QuantizedRows alone; with a residual, it is updated in
    place to residual + x, as triton_kernels.add_rms_norm does."""
    n_cols = x.shape[-1]
    num_rows = x.numel() // n_cols
    rows = _empty_rows(num_rows, n_cols, x.device)
    if num_rows == 0:
        return rows
    block = triton.next_power_of_2(n_cols)
    _add_rms_norm_rows_kernel[(num_rows,)](
        x, residual if residual is not None else x, weight, rows.values, rows.scales, n_cols, eps,
        HAS_RESIDUAL=residual is not None, BLOCK=block, num_warps=min(16, max(1, block // 256)),
    )
    return rows


@triton.jit
def _load_rows(row_ptr, cols, mask, n_cols, GATED: tl.constexpr):
    """The values at cols as stored: a gated row's gate and up halves (gate | up, 2 * n_cols
    wide), or a plain row's values twice."""
    x = tl.load(row_ptr + cols, mask=mask, other=0.0)
    if GATED:
        return x, tl.load(row_ptr + n_cols + cols, mask=mask, other=0.0)
    return x, x


@triton.jit
def _activate(x, up, ACT: tl.constexpr, GATED: tl.constexpr):
    """act(x) * up (gated) or act(x), float32 holding the storage dtype's rounding where the
    references round."""
    dtype = x.dtype
    x = x.to(tl.float32)
    if ACT == 0:
        act = x * tl.sigmoid(x)
    elif ACT == 1:  # GELU by the erfc fit below: libdevice's erf costs more than the row's memory traffic
        act = x * _normal_cdf(x)
    elif ACT == 2:  # tanh(y) = 2 sigmoid(2y) - 1
        inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
        act = 0.5 * x * (2.0 * tl.sigmoid(2.0 * inner))
    elif ACT == 3:
        act = tl.maximum(x, 0.0)
    else:  # _IDENTITY: x is in the storage dtype already
        act = x
    if ACT != _IDENTITY:
        act = act.to(dtype).to(tl.float32)
    if GATED:
        act = (act * up.to(tl.float32)).to(dtype).to(tl.float32)
    return act


@triton.jit
def _normal_cdf(x):
    """Phi(x) = erfc(-x / sqrt 2) / 2 by a Chebyshev fit of erfc with a fractional error below
    1.2e-7 everywhere (Numerical Recipes' erfcc): branch-free, one reciprocal and one exp, where
    libdevice's erf takes two polynomial paths. Far below bf16's rounding, the activation's output."""
    z = tl.abs(x) * 0.7071067811865476
    t = tl.fdiv(1.0, 1.0 + 0.5 * z)  # not IEEE-rounded: within two units in the last place, and far cheaper
    poly = -0.82215223 + t * 0.17087277
    poly = 1.48851587 + t * poly
    poly = -1.13520398 + t * poly
    poly = 0.27886807 + t * poly
    poly = -0.18628806 + t * poly
    poly = 0.09678418 + t * poly
    poly = 0.37409196 + t * poly
    poly = 1.00002368 + t * poly
    half_erfc = 0.5 * t * tl.exp(-z * z - 1.26551223 + t * poly)  # erfc(|x| / sqrt 2) / 2
    return tl.where(x >= 0, 1.0 - half_erfc, half_erfc)


@triton.jit
def _activated(row_ptr, cols, mask, n_cols, ACT: tl.constexpr, GATED: tl.constexpr):
    x, up = _load_rows(row_ptr, cols, mask, n_cols, GATED)
    return _activate(x, up, ACT, GATED)


@triton.jit
def _block_of_rows(block, num_rows, n_cols, in_cols, first_col, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    """Rows block * ROWS onwards, ROWS of them, columns first_col onwards, BLOCK of them: their
    indices, columns, mask and input offsets."""
    rows = block * ROWS + tl.arange(0, ROWS).to(tl.int64)
    cols = first_col + tl.arange(0, BLOCK)
    mask = (rows < num_rows)[:, None] & (cols < n_cols)[None, :]
    return rows, cols, mask, rows[:, None] * in_cols + cols[None, :]


@triton.jit
def _load_block(x_ptr, block, num_rows, n_cols, in_cols, first_col, GATED: tl.constexpr, ROWS: tl.constexpr,
                BLOCK: tl.constexpr):
    """_block_of_rows' rows and columns with their values as stored (_load_rows)."""
    rows, cols, mask, offsets = _block_of_rows(block, num_rows, n_cols, in_cols, first_col, ROWS, BLOCK)
    x, up = _load_rows(x_ptr + offsets, 0, mask, n_cols, GATED)
    return rows, cols, mask, x, up


@triton.jit
def _load_whole_rows(x_ptr, block, num_rows, n_cols, in_cols, GATED: tl.constexpr, ROWS: tl.constexpr,
                     BLOCK: tl.constexpr, TAIL: tl.constexpr):
    """A block of rows held whole: its first BLOCK columns and, with TAIL, the TAIL after them
    (without, the tail's names repeat the first block's and go unused)."""
    rows, cols, mask, x, up = _load_block(x_ptr, block, num_rows, n_cols, in_cols, 0, GATED, ROWS, BLOCK)
    tail_cols, tail_mask, tail_x, tail_up = cols, mask, x, up
    if TAIL:
        _, tail_cols, tail_mask, tail_x, tail_up = _load_block(x_ptr, block, num_rows, n_cols, in_cols, BLOCK, GATED,
                                                               ROWS, TAIL)
    return rows, cols, mask, x, up, tail_cols, tail_mask, tail_x, tail_up


@triton.jit
def _activate_and_store(x, up, tail_x, tail_up, rows, cols, mask, tail_cols, tail_mask, num_rows, n_cols, q_ptr,
                        scale_ptr, ACT: tl.constexpr, GATED: tl.constexpr, TAIL: tl.constexpr):
    """Rows held whole, as a block of columns and, with TAIL, a block after it: activated, their
    largest magnitude over both, then their e4m3 values and scales."""
    h = tl.where(mask, _activate(x, up, ACT, GATED), 0.0)
    amax = tl.max(tl.abs(h), axis=1)
    if TAIL:
        tail_h = tl.where(tail_mask, _activate(tail_x, tail_up, ACT, GATED), 0.0)
        amax = tl.maximum(amax, tl.max(tl.abs(tail_h), axis=1))
    scale = _scale_of(amax)
    _store_quantized(h, scale, rows, cols, mask, n_cols, q_ptr)
    if TAIL:
        _store_quantized(tail_h, scale, rows, tail_cols, tail_mask, n_cols, q_ptr)
    tl.store(scale_ptr + rows, scale, mask=rows < num_rows)


@triton.jit
def _activation_rows_kernel(x_ptr, q_ptr, scale_ptr, num_rows, n_cols, ACT: tl.constexpr, GATED: tl.constexpr,
                            BLOCK: tl.constexpr, WHOLE_ROW: tl.constexpr, ROWS: tl.constexpr,
                            PREFETCH: tl.constexpr, TAIL: tl.constexpr):
    # Rows held whole where a row fits (read and activated once), ROWS to a block: one block per
    # program, or with PREFETCH blocks in turn, each one's loads issued while the one before
    # reduces and stores. A row held whole is BLOCK columns and, with TAIL, TAIL more after them
    # (both powers of two), so that a width such as 3,072 is held as 2,048 + 1,024 values, not
    # padded to 4,096, whose masked lanes would compute the activation for nothing. Longer rows
    # one to a program, in chunks of BLOCK columns, the largest magnitude first, then the values.
    in_cols = 2 * n_cols if GATED else n_cols
    if WHOLE_ROW and PREFETCH:
        step = tl.num_programs(0)
        rows, cols, mask, x, up, tail_cols, tail_mask, tail_x, tail_up = _load_whole_rows(
            x_ptr, tl.program_id(0), num_rows, n_cols, in_cols, GATED, ROWS, BLOCK, TAIL)
        for block in range(tl.program_id(0), tl.cdiv(num_rows, ROWS), step):
            (next_rows, next_cols, next_mask, next_x, next_up, next_tail_cols, next_tail_mask, next_tail_x,
             next_tail_up) = _load_whole_rows(x_ptr, block + step, num_rows, n_cols, in_cols, GATED, ROWS, BLOCK, TAIL)
            _activate_and_store(x, up, tail_x, tail_up, rows, cols, mask, tail_cols, tail_mask, num_rows, n_cols,
                                q_ptr, scale_ptr, ACT, GATED, TAIL)
            rows, cols, mask, x, up = next_rows, next_cols, next_mask, next_x, next_up
            tail_cols, tail_mask, tail_x, tail_up = next_tail_cols, next_tail_mask, next_tail_x, next_tail_up
    elif WHOLE_ROW:
        rows, cols, mask, x, up, tail_cols, tail_mask, tail_x, tail_up = _load_whole_rows(
            x_ptr, tl.program_id(0), num_rows, n_cols, in_cols, GATED, ROWS, BLOCK, TAIL)
        _activate_and_store(x, up, tail_x, tail_up, rows, cols, mask, tail_cols, tail_mask, num_rows, n_cols, q_ptr,
                            scale_ptr, ACT, GATED, TAIL)
    else:
        row = tl.program_id(0).to(tl.int64)
        row_ptr = x_ptr + row * in_cols
        largest = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            mask = cols < n_cols
            h = _activated(row_ptr, cols, mask, n_cols, ACT, GATED)
            largest = tl.maximum(largest, tl.where(mask, tl.abs(h), 0.0))
        scale = _scale_of(tl.max(largest, axis=0))
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            mask = cols < n_cols
            h = _activated(row_ptr, cols, mask, n_cols, ACT, GATED)
            tl.store(q_ptr + row * n_cols + cols, _quantized(h, scale, q_ptr), mask=mask)
        tl.store(scale_ptr + row, scale)


@dataclass(frozen=True)
class RowLaunch:
    """How the row kernels cover rows of a width: held whole (`whole_row`, in blocks of `rows`
    rows, as `block` columns and `tail` more after them; with `programs` set, that many programs
    walk the blocks in turn, prefetching) or in chunks of `block` columns, one row to a program."""

    block: int
    whole_row: bool
    rows: int = 1
    num_warps: int = 4
    programs: int | None = None
    tail: int = 0

    def grid(self, num_rows: int) -> tuple[int]:
        blocks = triton.cdiv(num_rows, self.rows)
        return (min(blocks, self.programs) if self.programs else blocks,)

    def kwargs(self) -> dict:
        return {"BLOCK": self.block, "WHOLE_ROW": self.whole_row, "ROWS": self.rows,
                "PREFETCH": self.programs is not None, "TAIL": self.tail, "num_warps": self.num_warps}


def row_launch(n_cols: int, rows: int = 1, num_warps: int | None = None, programs: int | None = None,
               gated: bool = False, split: bool = True) -> RowLaunch:
    """The row kernels' launch for rows of n_cols (a gated input is twice as wide): held whole
    where a row fits _WHOLE_ROW_MAX, else walked in chunks of _CHUNK. A width that is not a power
    of two is held as the largest power of two below it and a tail (`split`; without it, padded
    to the next power of two). By default one row to a program, the fewest warps (4 at least)
    that hold it with at most _VALUES_PER_THREAD values a thread; bench/probes/fp8_row_kernels.py times
    the others against it. `gated` is kept for the callers: a gated row's two halves become one
    activated value each, so a thread holds as many values either way."""
    padded = triton.next_power_of_2(n_cols)
    if padded > _WHOLE_ROW_MAX:
        return RowLaunch(_CHUNK, False, num_warps=num_warps or 4)
    block, tail = head_and_tail(n_cols) if split else (padded, 0)
    threads = triton.cdiv(rows * (block + tail), _VALUES_PER_THREAD)
    warps = num_warps or max(4, min(32, triton.next_power_of_2(triton.cdiv(threads, 32))))
    return RowLaunch(block, True, rows, warps, programs, tail)


def head_and_tail(n_cols: int) -> tuple[int, int]:
    """n_cols as the largest power of two not above it and the power of two that covers the rest
    (0 where nothing is left): 3,072 as 2,048 + 1,024, 9,728 as 8,192 + 2,048."""
    head = 1 << (n_cols.bit_length() - 1)
    return head, triton.next_power_of_2(n_cols - head) if n_cols > head else 0


def act_and_mul_rows(gate_up: torch.Tensor, activation: str = "silu", launch: RowLaunch | None = None) -> QuantizedRows:
    """[T, 2I] (gate | up) -> act(gate) * up as QuantizedRows [T, I]; act one of triton_kernels.ACTIVATIONS.
    `launch`: row_launch(I) unless the benchmark or a test sweeps it."""
    return _activation_rows(gate_up, gate_up.shape[1] // 2, ACTIVATIONS[activation], True, launch)


def activation_rows(x: torch.Tensor, activation: str, launch: RowLaunch | None = None) -> QuantizedRows:
    """[T, I] -> act(x) as QuantizedRows; act one of ROW_ACTIVATIONS ("gelu", "gelu_tanh", "relu", "silu")."""
    return _activation_rows(x, x.shape[1], ROW_ACTIVATIONS[activation], False, launch)


def _activation_rows(x: torch.Tensor, n_cols: int, act: int, gated: bool, launch: RowLaunch | None) -> QuantizedRows:
    num_rows = x.shape[0]
    rows = _empty_rows(num_rows, n_cols, x.device)
    if num_rows == 0:
        return rows
    # Quantizing alone computes nothing a padded lane could waste, and one block reduces faster than two.
    launch = launch or row_launch(n_cols, gated=gated, split=act != _IDENTITY.value)
    _activation_rows_kernel[launch.grid(num_rows)](x, rows.values, rows.scales, num_rows, n_cols, ACT=act,
                                                   GATED=gated, **launch.kwargs())
    return rows


@triton.jit
def _activation_at_scales_kernel(x_ptr, in_scale_ptr, q_ptr, scale_ptr, num_rows, n_cols, bound_weight, bound_offset,
                                 ACT: tl.constexpr, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    # Elementwise: each row's scale comes from its input's scale (quantized_rows.bounded_scales),
    # so no program needs a whole row, and a block of ROWS x BLOCK values is read, activated and
    # written once.
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    row_mask = rows < num_rows
    mask = row_mask[:, None] & (cols < n_cols)[None, :]
    offsets = rows[:, None].to(tl.int64) * n_cols + cols[None, :]
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    scale = tl.load(in_scale_ptr + rows, mask=row_mask, other=1.0) * bound_weight + bound_offset
    tl.store(q_ptr + offsets, _quantized_by(_activate(x, x, ACT, False), (1.0 / scale)[:, None], q_ptr), mask=mask)
    if tl.program_id(1) == 0:
        tl.store(scale_ptr + rows, scale, mask=row_mask)


@dataclass(frozen=True)
class BlockLaunch:
    """Blocks of `rows` x `block` values, one to a program."""

    rows: int = 4
    block: int = 1024
    num_warps: int = 4


def activation_rows_at_scales(x: torch.Tensor, input_scales: torch.Tensor, bound: ScaleBound, activation: str,
                              launch: BlockLaunch | None = None) -> QuantizedRows:
    """[T, I] -> act(x) as QuantizedRows at the scales `bound` gives from input_scales [T, 1] (the
    scales of the GEMM's input that produced x: quantized_rows.bounded_scales), act one of
    ROW_ACTIVATIONS but "silu"."""
    num_rows, n_cols = x.shape
    rows = _empty_rows(num_rows, n_cols, x.device)
    if num_rows == 0:
        return rows
    launch = launch or BlockLaunch()
    grid = (triton.cdiv(num_rows, launch.rows), triton.cdiv(n_cols, launch.block))
    _activation_at_scales_kernel[grid](x, input_scales, rows.values, rows.scales, num_rows, n_cols, bound.weight,
                                       bound.offset, ACT=ROW_ACTIVATIONS[activation], ROWS=launch.rows,
                                       BLOCK=launch.block, num_warps=launch.num_warps)
    return rows


def quantize_rows(x: torch.Tensor, launch: RowLaunch | None = None) -> QuantizedRows:
    """[T, K] contiguous -> QuantizedRows: the attention's output on its way to an FP8 o_proj.
    `launch` as in act_and_mul_rows."""
    return _activation_rows(x, x.shape[1], _IDENTITY.value, False, launch)


def _empty_rows(num_rows: int, n_cols: int, device: torch.device) -> QuantizedRows:
    return QuantizedRows(torch.empty(num_rows, n_cols, dtype=FP8_DTYPE, device=device),
                         torch.empty(num_rows, 1, dtype=torch.float32, device=device))
