"""The FP8 row kernels (engine/rose/quantization/triton_fp8_kernels.py) against the memory's speed, launch by launch.

An FP8 linear's input is written by a row kernel (activation and quantize, or quantize alone)
that reads bf16 and writes e4m3 plus a scale per row; in the engine it is the largest cost FP8
adds to a batch (bench/results/gpu/gpu-profile-fp8.md). This times each kernel on the benchmark
shapes' activations, 16,384 tokens, inside a CUDA graph (as the engine runs it), for rows held
whole in blocks of `rows`, one block to a program or fewer programs walking them in turn
(prefetching the next block's rows while the last ones reduce and store), and several warp
counts, a width that is not a power of two held as a power of two and a tail (the default) or
padded to the next power of two, against two floors on the same tensors: torch's plain bf16 -> e4m3 cast of the
output's columns (an elementwise pass: no row maximum, no activation) and a bf16 copy of the
input. Each launch's output is checked against the kernel's default launch (bitwise: the same
arithmetic in another grid).

Usage (on a GPU; bench/gpu_session.sh fp8-rows):
  python3 bench/probes/fp8_row_kernels.py --out bench/results/fp8/fp8-row-kernels.md
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.lib.common import CALLS_PER_GRAPH, gpu_run_lines, graph_seconds, publish  # noqa: E402

TOKENS = 16384
# name, kernel, activation, columns of its output (a gated input is twice as wide)
CASES = [
    ("bert-base up: GELU", "activation", "gelu", 3072),
    ("bert-base up: ReLU (GELU's cost)", "activation", "relu", 3072),
    ("qwen3-0.6b gate/up: SiLU x up", "gated", "silu", 3072),
    ("qwen3-4b gate/up: SiLU x up", "gated", "silu", 9728),
    ("bert-base attention output", "quantize", None, 768),
    ("qwen3-0.6b attention output", "quantize", None, 2048),
    ("qwen3-4b attention output", "quantize", None, 4096),
]
ROWS = (1, 2, 4, 8)
WARPS = (4, 8, 16, 32)
# Prefetching launches: rows per block, warps, programs per SM.
PREFETCH_ROWS, PREFETCH_WARPS, PROGRAMS_PER_SM = (1, 2), (4, 8), (4, 8)


def case_rows(kernel: str, activation: str | None, n_cols: int, kernels):
    x = torch.randn(TOKENS, 2 * n_cols if kernel == "gated" else n_cols, device="cuda", dtype=torch.bfloat16) * 2

    def run(launch):
        if kernel == "gated":
            return kernels.act_and_mul_rows(x, activation, launch)
        if kernel == "activation":
            return kernels.activation_rows(x, activation, launch)
        return kernels.quantize_rows(x, launch)

    return x, run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from rose_embed.engine.rose.quantization import triton_fp8_kernels as kernels

    lines = [
        "# FP8 row kernels against the memory's speed",
        "",
        *gpu_run_lines(),
        f"- {TOKENS:,} tokens of N(0, 2) bf16, each kernel {CALLS_PER_GRAPH} times in a CUDA graph; GB/s counts "
        "the bf16 read and the e4m3 and scales written; `cast` is torch's bf16 -> e4m3 cast of the output's "
        "columns (an elementwise pass: no row maximum, no activation), `copy` a bf16 copy of the input",
        "",
        "| activation | launch | us | GB/s | of cast's GB/s | same as default |",
        "|---|---|---:|---:|---:|---|",
    ]
    for case in CASES:
        lines += case_lines(*case, kernels)
        torch.cuda.empty_cache()
    publish("\n".join(lines) + "\n", args.out)


def case_lines(name: str, kernel: str, activation: str | None, n_cols: int, kernels) -> list[str]:
    """The table's rows for one activation: the floors, then each launch."""
    x, run = case_rows(kernel, activation, n_cols, kernels)
    moved = x.numel() * 2 + TOKENS * n_cols + TOKENS * 4
    source = x[:, :n_cols].contiguous()
    cast_rate = source.numel() * 3 / graph_seconds(lambda: source.to(torch.float8_e4m3fn))
    copy_rate = x.numel() * 4 / graph_seconds(lambda: x.clone())
    lines = [f"| {name} | cast | {source.numel() * 3 / cast_rate * 1e6:.1f} | {cast_rate / 1e9:,.0f} | 1.00 | |",
             f"| {name} | copy of the input | {x.numel() * 4 / copy_rate * 1e6:.1f} | {copy_rate / 1e9:,.0f} | "
             f"{copy_rate / cast_rate:.2f} | |"]
    gated = kernel == "gated"
    default_launch = kernels.row_launch(n_cols, gated=gated, split=kernel != "quantize")
    want = run(default_launch)
    launches = [default_launch]
    if default_launch.whole_row:
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        # Blocks of several rows no larger than the widest row held whole: past it, registers spill.
        padded = 1 << (n_cols - 1).bit_length()
        rows_per_block = [rows for rows in ROWS if rows * padded <= kernels._WHOLE_ROW_MAX]
        # A width not a power of two, padded to the next one as before the head-and-tail split.
        if default_launch.tail or 1 << (n_cols.bit_length() - 1) != n_cols:
            split = not default_launch.tail  # the other way of holding the row
            launches += [kernels.row_launch(n_cols, num_warps=warps, gated=gated, split=split)
                         for warps in (None, *WARPS)]
        launches += [kernels.row_launch(n_cols, rows, warps, gated=gated) for rows in rows_per_block for warps in WARPS]
        launches += [kernels.row_launch(n_cols, rows, warps, sms * per_sm, gated=gated) for rows in PREFETCH_ROWS
                     for warps in PREFETCH_WARPS for per_sm in PROGRAMS_PER_SM]
    else:  # past _WHOLE_ROW_MAX: chunks, and whole rows with many warps all the same
        launches += [kernels.row_launch(n_cols, num_warps=warps) for warps in WARPS]
        block = 1 << (n_cols - 1).bit_length()
        launches += [kernels.RowLaunch(block, True, 1, warps) for warps in (16, 32)]
    for index, launch in enumerate(launches):
        try:
            got = run(launch)
            same = torch.equal(got.values.view(torch.uint8), want.values.view(torch.uint8)) and torch.equal(
                got.scales, want.scales)
            seconds = graph_seconds(lambda: run(launch))
        except Exception as error:  # a launch past the registers or shared memory: say so, go on
            lines.append(f"| {name} | {_label(launch)} | failed: {type(error).__name__} | | | |")
            continue
        label = ("default: " if index == 0 else "") + _label(launch)
        lines.append(f"| {name} | {label} | {seconds * 1e6:.1f} | {moved / seconds / 1e9:,.0f} | "
                     f"{moved / seconds / cast_rate:.2f} | {'yes' if same else 'NO'} |")
    return lines


def _label(launch) -> str:
    if not launch.whole_row:
        return f"chunks of {launch.block}, {launch.num_warps} warps"
    walked = f", {launch.programs} programs prefetching" if launch.programs else ""
    held = f"{launch.block} + {launch.tail}" if launch.tail else f"{launch.block}"
    return f"{launch.rows} row(s) whole as {held}, {launch.num_warps} warps{walked}"


if __name__ == "__main__":
    main()
