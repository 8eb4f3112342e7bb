"""The BERT family's FP8 MLP three ways, each followed by the down projection: cuBLAS's rowwise
GEMM, then a GELU-and-quantize pass over whole rows (the row's largest value sets its scale); the
same GEMM, then an elementwise GELU-and-quantize at scales bounded from the GEMM's input scales
(quantized_rows.bounded_scales: no step needs a whole row); one Triton GEMM whose epilogue
activates and quantizes at those scales (engine/rose/quantization/triton_fp8_gemm.py, with ReLU too,
whose epilogue costs next to nothing). bf16's MLP (the GEMM with GELU in its epilogue) beside them.

Each launch of the bounded paths is checked against its reference (fp8_fused.linear_activation_rows
on the same GPU tensors with the fused kernels off: the scales closely, each value within one
e4m3 step) and timed, 20 calls in a CUDA graph as the engine runs it; the MLP's output is
compared with float32's on the same inputs (row cosine). BERT-base's shape (768 -> 3,072 -> 768)
by default, random weights as tiny_model.py makes them (normal, std 0.02), inputs as a
LayerNorm leaves them.

Usage (on a GPU; bench/gpu_session.sh fp8-gemm):
  python3 bench/probes/fp8_gemm_epilogue.py --out bench/results/fp8/fp8-gemm-epilogue.md
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.lib.common import CALLS_PER_GRAPH, gpu_run_lines, graph_seconds, publish  # noqa: E402

LAUNCHES = [  # block_m, block_n, block_k, group_m, warps, stages, tma, persistent
    (128, 128, 128, 8, 8, 3, True, True),
    (128, 128, 128, 8, 8, 4, True, True),
    (128, 128, 64, 8, 8, 4, True, True),
    (128, 256, 64, 8, 8, 3, True, True),
    (128, 128, 128, 16, 8, 3, True, True),
    (64, 128, 128, 8, 4, 4, True, True),
    (128, 128, 128, 8, 8, 4, False, False),
    (128, 128, 128, 8, 8, 4, True, False),
]
# The elementwise pass's launches: rows, columns, warps.
BLOCK_LAUNCHES = [(4, 1024, 4), (1, 1024, 4), (2, 2048, 8), (8, 512, 4), (4, 1024, 8), (16, 256, 4)]


def row_cosine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.cosine_similarity(a.float(), b.float(), dim=1)


def mlp_arguments(description: str) -> argparse.Namespace:
    """--tokens (a list), --hidden, --intermediate (BERT-base's MLP by default) and --out."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", default="16384,4096,1024")
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--intermediate", type=int, default=3072)
    parser.add_argument("--out", type=Path)
    return parser.parse_args()


def random_linear(in_features: int, out_features: int) -> nn.Linear:
    """A bf16 linear layer on the GPU, weights and bias N(0, 0.02) as tiny_model.py makes them."""
    linear = nn.Linear(in_features, out_features)
    nn.init.normal_(linear.weight, std=0.02)
    nn.init.normal_(linear.bias, std=0.02)
    return linear.cuda().bfloat16()


def main() -> None:
    args = mlp_arguments(__doc__)
    from rose_embed.engine.rose.layers import fused
    from rose_embed.engine.rose.quantization import fp8_fused, triton_fp8_gemm, triton_fp8_kernels as kernels
    from rose_embed.engine.rose.quantization.fp8 import Fp8Linear
    from rose_embed.engine.rose.quantization.quantized_rows import quantize_rows_reference

    torch.manual_seed(0)
    up, down = random_linear(args.hidden, args.intermediate), random_linear(args.intermediate, args.hidden)
    up8, down8 = Fp8Linear(up), Fp8Linear(down)
    lines = [
        "# The BERT family's FP8 MLP: a GELU-and-quantize pass against the GEMM that quantizes its own output",
        "",
        *gpu_run_lines(f"; triton {__import__('triton').__version__}"),
        f"- {args.hidden} -> {args.intermediate} -> {args.hidden}, weights and biases N(0, 0.02), inputs N(0, 1) "
        f"rows as a LayerNorm leaves them; each step {CALLS_PER_GRAPH} times in a CUDA graph; fast accumulation; "
        f"bound/max: the bounded scale over the row's own largest value's (median); cos: the MLP's output "
        f"against float32's (min over rows)",
        "",
        "| tokens | path | launch | us | x bf16 MLP | up step us | same as reference | min cos | bound/max |",
        "|---:|---|---|---:|---:|---:|---|---:|---:|",
    ]
    for tokens in [int(t) for t in args.tokens.split(",")]:
        x = torch.randn(tokens, args.hidden, device="cuda").bfloat16()
        rows = quantize_rows_reference(x)
        want32 = F.linear(F.gelu(F.linear(x.float(), up.weight.float(), up.bias.float())), down.weight.float(),
                          down.bias.float())

        def bf16_mlp():
            return F.linear(fused.linear_gelu(x, up.weight, up.bias, "none"), down.weight, down.bias)

        def pass_up():
            return kernels.activation_rows(up8(rows), "gelu")

        bf16_us = graph_seconds(bf16_mlp) * 1e6
        lines.append(f"| {tokens:,} | bf16: GEMM with GELU epilogue, GEMM | | {bf16_us:.1f} | 1.00 | | | "
                     f"{row_cosine(bf16_mlp(), want32).min():.5f} | |")
        pass_us = graph_seconds(lambda: down8(pass_up())) * 1e6
        exact = pass_up()
        lines.append(f"| {tokens:,} | FP8: cuBLAS GEMM, GELU-and-quantize pass, cuBLAS GEMM | | {pass_us:.1f} | "
                     f"{bf16_us / pass_us:.2f} | {graph_seconds(pass_up) * 1e6:.1f} | | "
                     f"{row_cosine(down8(exact), want32).min():.5f} | 1.00 |")
        fused.set_fused_kernels(False)
        reference = fp8_fused.linear_activation_rows(up8, rows, "gelu")
        fused.set_fused_kernels(True)
        for spec in BLOCK_LAUNCHES:
            block_launch = kernels.BlockLaunch(*spec)

            def bounded_up():
                return kernels.activation_rows_at_scales(up8(rows), rows.scales, up8.scale_bound, "gelu", block_launch)
            lines.append(_measured(tokens, "FP8: cuBLAS GEMM, elementwise GELU-and-quantize at bounded scales, "
                                   "cuBLAS GEMM", f"{spec[0]} rows x {spec[1]}, {spec[2]} warps", bounded_up, down8,
                                   reference, exact, bf16_us, want32))
        for spec in LAUNCHES:
            launch = triton_fp8_gemm.GemmLaunch(*spec)
            for activation in ("gelu", "relu") if spec == LAUNCHES[0] else ("gelu",):
                def fused_up(launch=launch, activation=activation):
                    return triton_fp8_gemm.linear_activation_rows(rows, up8.weight, up8.weight_scale, up8.bias,
                                                                  up8.scale_bound, activation, True, launch)
                lines.append(_measured(tokens, f"FP8: GEMM {activation}-and-quantizing its output, cuBLAS GEMM",
                                       _label(launch), fused_up, down8, reference if activation == "gelu" else None,
                                       exact, bf16_us, want32))
        torch.cuda.empty_cache()
    publish("\n".join(lines) + "\n", args.out)


def _measured(tokens, path, label, up, down, reference, exact, bf16_us, want32) -> str:
    """One table row: the up step `up` (its output checked against `reference` where given), then the MLP."""
    from tests.support.fp8_checks import assert_rows_close

    try:
        got = up()
        same = ""
        if reference is not None:
            try:
                assert_rows_close(got, reference)
                same = "yes"
            except AssertionError as error:
                same = f"NO: {str(error)[:60]}"
        up_us = graph_seconds(up) * 1e6
        mlp_us = graph_seconds(lambda: down(up())) * 1e6
    except Exception as error:  # a launch past the registers or shared memory: say so, go on
        return f"| {tokens:,} | {path} | {label} | failed: {type(error).__name__}: {str(error)[:80]} | | | | | |"
    ratio = (got.scales / exact.scales).median().item()
    return (f"| {tokens:,} | {path} | {label} | {mlp_us:.1f} | {bf16_us / mlp_us:.2f} | {up_us:.1f} | {same} | "
            f"{row_cosine(down(got), want32).min():.5f} | {ratio:.1f} |")


def _label(launch) -> str:
    return (f"{launch.block_m}x{launch.block_n}x{launch.block_k}, group {launch.group_m}, {launch.num_warps} warps, "
            f"{launch.num_stages} stages{', TMA' if launch.tma else ''}{', persistent' if launch.persistent else ''}")


if __name__ == "__main__":
    main()
