"""Which of cuBLASLt's algorithms should the rowwise FP8 GEMMs run? In a profile of an FP8 batch
in its CUDA graph (bench/gpu_profile.py) a memset comes before each torch._scaled_mm, and the
graph waits between them. Per GEMM shape of the benchmark models at 16,384 tokens, with the scales
the engine's rows carry (one per token, one per output channel; bf16 out, fast accumulation):

- torch._scaled_mm, what the engine runs;
- cuBLASLt's best within 32 MiB of workspace (engine/rose/quantization/cublaslt_fp8.py, ctypes);
- its first few within no workspace at all;

each timed CALLS_PER_GRAPH calls in a CUDA graph, with the memsets one call launches
(torch.profiler) and the largest difference from torch._scaled_mm's output.

Usage (on a GPU; bench/gpu_session.sh fp8-algos):
  python3 bench/probes/fp8_gemm_algos.py --out bench/results/fp8/fp8-gemm-algos.md
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.lib.common import CALLS_PER_GRAPH, gpu_run_lines, graph_seconds, publish  # noqa: E402

# (model, layers, [(linear, out_features, in_features, has_bias)]) as bench/fp8_bench.py's shapes.
SHAPES = [
    ("bert-base", 12, [("qkv", 2304, 768, True), ("o_proj", 768, 768, True), ("up", 3072, 768, True),
                       ("down", 768, 3072, True)]),
    ("qwen3-0.6b", 28, [("qkv", 4096, 1024, False), ("o_proj", 1024, 2048, False),
                        ("gate_up", 6144, 1024, False), ("down", 1024, 3072, False)]),
    ("qwen3-4b", 36, [("qkv", 6144, 2560, False), ("o_proj", 2560, 4096, False),
                      ("gate_up", 19456, 2560, False), ("down", 2560, 9728, False)]),
]
NO_WORKSPACE_RANKS = 4


def memsets(fn) -> int:
    """How many memsets one call of fn launches on the GPU."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(1 for event in prof.events() if "memset" in event.name.lower())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--models", default=",".join(name for name, _, _ in SHAPES))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from rose_embed.engine.rose.quantization import cublaslt_fp8
    from rose_embed.engine.rose.quantization.quantized_rows import quantize_rows_reference

    torch.manual_seed(0)
    lines = ["# Rowwise FP8 GEMMs: torch._scaled_mm against cuBLASLt's algorithms", "", *gpu_run_lines(),
             f"- {args.tokens:,} tokens, inputs N(0, 1), weights N(0, 0.02); scales per token and per output channel, "
             f"bf16 out, fast accumulation; each GEMM {CALLS_PER_GRAPH} times in a CUDA graph", "",
             "| model | linear | N x K | GEMM | workspace | memsets | us | x torch | max abs diff |",
             "|---|---|---|---|---:|---:|---:|---:|---:|"]
    totals = []
    for model, layers, linears in SHAPES:
        if model not in args.models.split(","):
            continue
        torch_us = best_us = 0.0
        for name, n, k, has_bias in linears:
            rows = quantize_rows_reference(torch.randn(args.tokens, k, device="cuda").bfloat16())
            weight = quantize_rows_reference(torch.randn(n, k, device="cuda").bfloat16() * 0.02)
            weight_scale = weight.scales.reshape(1, -1).contiguous()
            bias = torch.randn(n, device="cuda").bfloat16() * 0.02 if has_bias else None

            def scaled_mm():
                return torch._scaled_mm(rows.values, weight.values.t(), scale_a=rows.scales, scale_b=weight_scale,
                                        bias=bias, out_dtype=torch.bfloat16, use_fast_accum=True)

            reference = scaled_mm()
            reference_us = graph_seconds(scaled_mm) * 1e6
            row = f"| {model} | {name} | {n} x {k} |"
            lines.append(f"{row} torch._scaled_mm | | {memsets(scaled_mm)} | {reference_us:.1f} | 1.000 | |")
            fastest = reference_us
            choices = [(cublaslt_fp8.WORKSPACE_BYTES, 0)] + [(0, rank) for rank in range(NO_WORKSPACE_RANKS)]
            for workspace_bytes, rank in choices:
                def lt(workspace_bytes=workspace_bytes, rank=rank):
                    return cublaslt_fp8.scaled_matmul(rows.values, rows.scales, weight.values, weight_scale, bias,
                                                      None, torch.bfloat16, None, True,
                                                      workspace_limits=(workspace_bytes,), rank=rank)

                out = lt()
                label = f"cuBLASLt {'best' if rank == 0 else f'#{rank + 1}'} within {workspace_bytes >> 20} MiB"
                if out is None:
                    lines.append(f"{row} {label} | | | no algorithm | | |")
                    continue
                # The plan is cached: this reads the algorithm the calls above ran.
                plan = cublaslt_fp8._plan(rows.values.device.index or 0, args.tokens, n, k,
                                          cublaslt_fp8.EPILOGUE_BIAS if has_bias else 1, torch.bfloat16, True, True,
                                          workspace_bytes, rank)
                us = graph_seconds(lt) * 1e6
                diff = (out.float() - reference.float()).abs().max().item()
                lines.append(f"{row} {label} | {plan.algo.workspace_size:,} | {memsets(lt)} | {us:.1f} | "
                             f"{reference_us / us:.3f} | {diff:.3g} |")
                if workspace_bytes == 0:
                    fastest = min(fastest, us)
            torch_us += reference_us
            best_us += fastest
        totals.append(f"- {model}: {layers} layers' FP8 GEMMs {layers * torch_us / 1000:.2f} ms by torch._scaled_mm, "
                      f"{layers * best_us / 1000:.2f} ms by the fastest of it and those within no workspace "
                      f"({torch_us / best_us:.3f}x)")
    publish("\n".join(lines + [""] + totals) + "\n", args.out)


if __name__ == "__main__":
    main()
