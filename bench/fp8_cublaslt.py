"""The BERT family's FP8 MLP with its up projection quantizing its own output, against bf16's MLP.

Paths, each followed by the down projection (torch._scaled_mm):

- `pass per row`: cuBLAS's rowwise GEMM writes bf16, then an elementwise GELU-and-quantize at
  each row's own bounded scale (quantized_rows.bounded_scales; what the engine ran before);
- `pass per batch`: the same, at one scale for the batch (quantized_rows.batch_bounded_scales);
- `cuBLASLt`: what the engine runs (fp8_fused.linear_activation_rows): one cuBLASLt GEMM whose
  epilogue adds the bias, applies GELU and writes e4m3 at the batch's scale
  (engine/rose/layers/cublaslt_fp8.py), with fast or promoted accumulation.

Checks: cuBLASLt with the bias alone and bf16 out against torch._scaled_mm (the binding's layouts
and scales); the fused step against its definition (the float32 product of the dequantized
operands plus bias, GELU's tanh form, divided by the batch's scale, rounded to e4m3: the share of
values equal, and within one e4m3 step); the MLP's output against float32's on the same inputs
(min row cosine). Each step is timed 20 calls in a CUDA graph. BERT-base's shape
(768 -> 3,072 -> 768) by default, weights N(0, 0.02), inputs N(0, 1) rows.

Usage (on a GPU; bench/gpu_session.sh fp8-lt):
  python3 bench/fp8_cublaslt.py --out bench/results/fp8-cublaslt.md
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import capture_graph, publish  # noqa: E402

CALLS_PER_GRAPH = 20


def graph_seconds(fn, repeats: int = 5) -> float:
    """Seconds per call of fn, from a CUDA graph of CALLS_PER_GRAPH calls (the median of `repeats` replays)."""
    graph = capture_graph(lambda: [fn() for _ in range(CALLS_PER_GRAPH)], warmups=2)
    times = []
    for _ in range(repeats + 1):
        torch.cuda.synchronize()
        start = time.perf_counter()
        graph.replay()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    del graph
    return sorted(times[1:])[repeats // 2] / CALLS_PER_GRAPH


def row_cosine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.cosine_similarity(a.float(), b.float(), dim=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", default="16384,4096,1024")
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--intermediate", type=int, default=3072)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from engine.rose.layers import cublaslt_fp8, fp8_fused, fused
    from engine.rose.layers import triton_fp8_kernels as kernels
    from engine.rose.layers.fp8 import Fp8Linear
    from engine.rose.layers.quantized_rows import FP8_DTYPE, FP8_MAX, dequantize_rows, quantize_rows_reference

    torch.manual_seed(0)
    up, down = nn.Linear(args.hidden, args.intermediate), nn.Linear(args.intermediate, args.hidden)
    for linear in (up, down):
        nn.init.normal_(linear.weight, std=0.02)
        nn.init.normal_(linear.bias, std=0.02)
    up, down = up.cuda().bfloat16(), down.cuda().bfloat16()
    lines = [
        "# The BERT family's FP8 MLP: cuBLASLt's GEMM with GELU in its epilogue and e4m3 out",
        "",
        f"- command: `python3 {' '.join(sys.argv)}`",
        f"- GPU: {torch.cuda.get_device_name()}; torch {torch.__version__}; "
        f"date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- {args.hidden} -> {args.intermediate} -> {args.hidden}, weights and biases N(0, 0.02), inputs N(0, 1) "
        f"rows; each step {CALLS_PER_GRAPH} times in a CUDA graph; down projection with fast accumulation; "
        f"cos: the MLP's output against float32's (min over rows); scale/max: the activation's scale over the "
        f"row's own largest value's (median)",
        "",
        "| tokens | path | MLP us | x bf16 MLP | up step us | check | min cos | scale/max |",
        "|---:|---|---:|---:|---:|---|---:|---:|",
    ]
    for tokens in [int(t) for t in args.tokens.split(",")]:
        x = torch.randn(tokens, args.hidden, device="cuda").bfloat16()
        rows = quantize_rows_reference(x)
        want32 = F.linear(F.gelu(F.linear(x.float(), up.weight.float(), up.bias.float())), down.weight.float(),
                          down.bias.float())

        def bf16_mlp():
            return F.linear(fused.linear_gelu(x, up.weight, up.bias, "none"), down.weight, down.bias)

        bf16_us = graph_seconds(bf16_mlp) * 1e6
        lines.append(f"| {tokens:,} | bf16: GEMM with GELU epilogue, GEMM | {bf16_us:.1f} | 1.00 | | | "
                     f"{row_cosine(bf16_mlp(), want32).min():.5f} | |")
        for fast in (True, False):
            up8, down8 = Fp8Linear(up, fast), Fp8Linear(down)
            h32 = F.linear(dequantize_rows(rows), up8.weight.float() * up8.weight_scale.t(), up8.bias.float())
            row_max = F.gelu(h32, approximate="tanh").abs().amax(dim=1, keepdim=True)

            def per_row():
                return kernels.activation_rows_at_scales(up8(rows), rows.scales, up8.scale_bound, "gelu_tanh")

            def per_batch():
                scales, _ = kernels.batch_bounded_scales(rows.scales, up8.scale_bound)
                return kernels.activation_rows_at_scales(up8(rows), scales, fp8_fused.GIVEN_SCALES, "gelu_tanh")

            def engine():
                return fp8_fused.linear_activation_rows(up8, rows, "gelu")

            accumulation = "fast" if fast else "promoted"
            for label, up_step in ((f"pass per row, {accumulation}", per_row),
                                   (f"pass per batch, {accumulation}", per_batch),
                                   (f"engine (cuBLASLt), {accumulation}", engine)):
                got = up_step()
                check = ""
                if up_step is engine:
                    exact = (F.gelu(h32, approximate="tanh") / got.scales).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
                    values, exact = got.values.float(), exact.float()
                    check = (f"{(values == exact).float().mean().item():.4f} equal to the definition, "
                             f"{((values - exact).abs() <= exact.abs() / 8 + 2.0 ** -9).float().mean().item():.5f} "
                             f"within a step")
                    fused_lt = cublaslt_fp8.scaled_matmul(rows.values, rows.scales, up8.weight, up8.weight_scale,
                                                          up8.bias, "gelu_tanh", FP8_DTYPE, 1 / got.scales[0], fast)
                    alone = cublaslt_fp8.scaled_matmul(rows.values, rows.scales, up8.weight, up8.weight_scale, up8.bias,
                                                       None, torch.bfloat16, None, fast)
                    if fused_lt is None:
                        check += "; cuBLASLt has no algorithm for it (the engine ran the pass)"
                        one = torch.ones(1, device="cuda")
                        for out_dtype in (torch.float8_e4m3fn, torch.bfloat16):
                            def tensorwise(out_dtype=out_dtype):
                                return cublaslt_fp8.scaled_matmul(
                                    rows.values, one, up8.weight, one, up8.bias, "gelu_tanh", out_dtype,
                                    one if out_dtype == FP8_DTYPE else None, fast, rowwise=False)
                            try:
                                took = "no algorithm" if tensorwise() is None else \
                                    f"{graph_seconds(tensorwise) * 1e6:.1f} us"
                            except Exception as error:  # a probe: report what cuBLASLt refuses
                                took = f"{type(error).__name__}: {error}"
                            check += f"; with one scale per operand, {out_dtype} out: {took}"
                    if alone is None:
                        check += "; bias alone, bf16 out: no algorithm"
                    else:
                        gap = (alone.float() - up8(rows).float()).abs().max().item()
                        lt_us = graph_seconds(lambda: cublaslt_fp8.scaled_matmul(
                            rows.values, rows.scales, up8.weight, up8.weight_scale, up8.bias, None, torch.bfloat16,
                            None, fast)) * 1e6
                        check += (f"; bias alone, bf16 out: largest gap to torch._scaled_mm {gap:.3g}, "
                                  f"{lt_us:.1f} us against its {graph_seconds(lambda: up8(rows)) * 1e6:.1f}")
                mlp_us = graph_seconds(lambda: down8(up_step())) * 1e6
                ratio = (got.scales / row_max.clamp(min=1e-12) * FP8_MAX).median().item()
                lines.append(f"| {tokens:,} | {label} | {mlp_us:.1f} | {bf16_us / mlp_us:.2f} | "
                             f"{graph_seconds(up_step) * 1e6:.1f} | {check} | "
                             f"{row_cosine(down8(got), want32).min():.5f} | {ratio:.1f} |")
        torch.cuda.empty_cache()
    publish("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
