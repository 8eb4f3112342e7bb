"""Can cuBLASLt's FP8 GEMM give the BERT family's up projection its GELU and e4m3 output in the
epilogue? Its FP8 GEMM through engine/rose/quantization/cublaslt_fp8.py (ctypes), on BERT-base's up
projection (768 -> 3,072), against what the engine runs (fp8_fused.linear_activation_rows:
cuBLAS's rowwise GEMM writing bf16, then an elementwise GELU-and-quantize pass at bounded scales)
and bf16's GEMM with GELU in its epilogue:

- rowwise scales (one per token, one per output channel, as the engine's FP8 rows carry): with
  the bias alone and bf16 out, and with bias, GELU and e4m3 out; "no algorithm" where cuBLASLt's
  heuristic serves neither;
- one scale per operand (what cuBLASLt serves with an epilogue): bias, GELU and e4m3 out, checked
  against its definition (the float32 product of the dequantized operands plus the bias, GELU's
  tanh form, times the output's inverse scale, rounded to e4m3: the share of values equal and
  within one e4m3 step), and with bf16 out.

Each step is timed 20 calls in a CUDA graph; weights and biases N(0, 0.02), inputs N(0, 1).

Usage (on a GPU; bench/gpu_session.sh fp8-lt):
  python3 bench/probes/fp8_cublaslt.py --out bench/results/fp8/fp8-cublaslt.md
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.lib.common import CALLS_PER_GRAPH, gpu_run_lines, graph_seconds, publish  # noqa: E402
from bench.probes.fp8_gemm_epilogue import mlp_arguments, random_linear  # noqa: E402


def main() -> None:
    args = mlp_arguments(__doc__)
    from rose_embed.engine.rose.layers import fused
    from rose_embed.engine.rose.quantization import cublaslt_fp8, fp8_fused
    from rose_embed.engine.rose.quantization.fp8 import Fp8Linear
    from rose_embed.engine.rose.quantization.quantized_rows import FP8_DTYPE, FP8_MAX, quantize_rows_reference

    torch.manual_seed(0)
    up = random_linear(args.hidden, args.intermediate)
    up8 = Fp8Linear(up)
    # One scale per operand: the weight's largest magnitude on 448.
    weight_scale = (up.weight.float().abs().max() / FP8_MAX).reshape(1)
    weight = (up.weight.float() / weight_scale).to(FP8_DTYPE)
    lines = [
        "# cuBLASLt's FP8 GEMM with GELU in its epilogue, on the BERT family's up projection",
        "",
        *gpu_run_lines(),
        f"- {args.hidden} -> {args.intermediate}, weights and biases N(0, 0.02), inputs N(0, 1) rows; each step "
        f"{CALLS_PER_GRAPH} times in a CUDA graph; fast accumulation",
        "",
        "| tokens | up step | us | check |",
        "|---:|---|---:|---|",
    ]
    for tokens in [int(t) for t in args.tokens.split(",")]:
        x = torch.randn(tokens, args.hidden, device="cuda").bfloat16()
        rows = quantize_rows_reference(x)

        def timed(label, fn, check=""):
            took = "no algorithm" if fn() is None else f"{graph_seconds(fn) * 1e6:.1f}"
            lines.append(f"| {tokens:,} | {label} | {took} | {check} |")

        timed("bf16: GEMM with GELU epilogue", lambda: fused.linear_gelu(x, up.weight, up.bias, "none"))
        timed("engine: rowwise GEMM, GELU-and-quantize pass at bounded scales",
              lambda: fp8_fused.linear_activation_rows(up8, rows, "gelu"))
        timed("torch._scaled_mm rowwise, bias, bf16 out", lambda: up8(rows))
        timed("cuBLASLt rowwise, bias, bf16 out", lambda: cublaslt_fp8.scaled_matmul(
            rows.values, rows.scales, up8.weight, up8.weight_scale, up8.bias, None, torch.bfloat16, None, True))
        timed("cuBLASLt rowwise, bias + GELU, bf16 out", lambda: cublaslt_fp8.scaled_matmul(
            rows.values, rows.scales, up8.weight, up8.weight_scale, up8.bias, "gelu_tanh", torch.bfloat16, None, True))
        inverse = torch.ones(1, device="cuda")
        timed("cuBLASLt rowwise, bias, e4m3 out", lambda: cublaslt_fp8.scaled_matmul(
            rows.values, rows.scales, up8.weight, up8.weight_scale, up8.bias, None, FP8_DTYPE, inverse, True))
        timed("cuBLASLt rowwise, bias + GELU, e4m3 out", lambda: cublaslt_fp8.scaled_matmul(
            rows.values, rows.scales, up8.weight, up8.weight_scale, up8.bias, "gelu_tanh", FP8_DTYPE, inverse, True))

        x_scale = (x.float().abs().max() / FP8_MAX).reshape(1)
        values = (x.float() / x_scale).to(FP8_DTYPE)
        h32 = F.linear(values.float() * x_scale, weight.float() * weight_scale, up.bias.float())
        out_scale = F.gelu(h32, approximate="tanh").abs().max() / FP8_MAX
        inverse = (1 / out_scale).reshape(1)

        def tensorwise(out_dtype=FP8_DTYPE):
            return cublaslt_fp8.scaled_matmul(values, x_scale, weight, weight_scale, up.bias, "gelu_tanh", out_dtype,
                                              inverse if out_dtype == FP8_DTYPE else None, True, rowwise=False)

        got = tensorwise()
        check = ""
        if got is not None:
            exact = (F.gelu(h32, approximate="tanh") * inverse).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE).float()
            step = torch.exp2(torch.floor(torch.log2(exact.abs().clamp(min=2.0 ** -6))) - 3)
            check = (f"{(got.float() == exact).float().mean().item():.4f} equal to the definition, "
                     f"{((got.float() - exact).abs() <= step).float().mean().item():.5f} within a step")
        timed("cuBLASLt one scale per operand, bias + GELU, e4m3 out", tensorwise, check)
        timed("cuBLASLt one scale per operand, bias + GELU, bf16 out", lambda: tensorwise(torch.bfloat16))
        torch.cuda.empty_cache()
    publish("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
