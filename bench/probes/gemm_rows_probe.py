"""One linear's GEMM at the token counts a batch can have, eagerly and replayed in a CUDA graph:
time per call, time per 1,000 rows and the kernel cuBLAS picked, bf16 and FP8 (rowwise scales,
fast accumulation, as the engine calls torch._scaled_mm).

    python3 bench/probes/gemm_rows_probe.py --out bench/results/gpu/gemm-rows-probe.md

Why: the whole-model graphs run each batch at its bucket's size (16,384 tokens for a full
batch of documents), while the eager profile runs it at its own (16,058). In the FP8 profile
(bench/results/gpu/gpu-profile-fp8.md) cuBLAS ran every Qwen3-0.6B GEMM with one kernel eagerly and
another, slower per row, in the graph; bf16's GEMMs keep their kernels across bucket sizes
(bench/results/gpu/matmul-sizes.md). This separates the two causes (the row count, the capture)
per linear, so that a bucket size or a GEMM choice can follow the measurement.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.lib.common import publish  # noqa: E402
from bench.probes.fp8_scaling_probe import LINEARS, quantize  # noqa: E402

CALLS_PER_GRAPH = 10


def gemm_call(precision: str, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None):
    """The call the engine makes for one linear, on fixed operands."""
    if precision == "bf16":
        return lambda: torch.nn.functional.linear(x, w, bias)
    xq, xs = quantize(x, 1, x.shape[1])
    wq, ws = quantize(w, 1, w.shape[1])
    return lambda: torch._scaled_mm(xq, wq.t(), scale_a=xs, scale_b=ws.t(), bias=bias, out_dtype=torch.bfloat16,
                                    use_fast_accum=True)


def time_eager_us(call, iters: int) -> float:
    for _ in range(3):
        call()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        call()
    end.record()
    end.synchronize()
    return 1e3 * start.elapsed_time(end) / iters


def captured(call) -> torch.cuda.CUDAGraph:
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        call()  # warm on the capture stream, as the engine's first eager run does
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(CALLS_PER_GRAPH):
            call()
    return graph


def time_graph_us(graph: torch.cuda.CUDAGraph, replays: int) -> float:
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    end.synchronize()
    return 1e3 * start.elapsed_time(end) / (replays * CALLS_PER_GRAPH)


def gemm_kernels(run) -> str:
    """The names of the device kernels one run launches, GEMMs first (memsets counted)."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    names: dict[str, int] = {}
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            names[event.name] = names.get(event.name, 0) + 1
    gemms = [n for n in names if "Memset" not in n and "Memcpy" not in n]
    memsets = sum(c for n, c in names.items() if "Memset" in n)
    text = ", ".join(f"`{n[:48]}`" for n in gemms) or "(none recorded)"
    return text + (f" + {memsets} memset" if memsets else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="qwen3-0.6b,bert-base,qwen3-4b")
    parser.add_argument("--rows", default="16384,16320,16256,16058,15360,8192",
                        help="token counts (GEMM rows) to time each linear at")
    parser.add_argument("--precisions", default="fp8,bf16")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    torch.manual_seed(0)
    rows_list = [int(r) for r in args.rows.split(",")]
    lines = [
        "# One linear's GEMM by token count, eager and in a CUDA graph",
        "",
        f"- command: `python3 {' '.join(sys.argv)}`",
        f"- GPU: {torch.cuda.get_device_name()}; torch {torch.__version__}; "
        f"date {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"- each call timed {args.iters} times eagerly and {CALLS_PER_GRAPH} to a graph, replayed {args.iters} times; "
        "us/1k rows = time per 1,000 rows (lower is better); kernels recorded from one eager call and one replay",
        "",
        "| model | linear | precision | rows | eager us | eager us/1k rows | graph us | graph us/1k rows "
        "| graph / eager | eager kernel | graph kernel |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    print("\n".join(lines), flush=True)
    for model in args.models.split(","):
        for name, k, n in LINEARS[model]:
            w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
            bias = torch.randn(n, device="cuda", dtype=torch.bfloat16) if model == "bert-base" else None
            for precision in args.precisions.split(","):
                for rows in rows_list:
                    x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
                    call = gemm_call(precision, x, w, bias)
                    eager_us = time_eager_us(call, args.iters)
                    graph = captured(call)
                    graph_us = time_graph_us(graph, args.iters)
                    line = (f"| {model} | {name} | {precision} | {rows} | {eager_us:,.1f} | {1e3 * eager_us / rows:.2f} "
                            f"| {graph_us:,.1f} | {1e3 * graph_us / rows:.2f} | {graph_us / eager_us:.3f} "
                            f"| {gemm_kernels(call)} | {gemm_kernels(graph.replay)} |")
                    lines.append(line)
                    print(line, flush=True)
                    del graph, call, x
                    torch.cuda.empty_cache()
    publish("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
