"""How far from the erf-GELU model in float32 does each way of running the up projection land?
Emulated on the CPU, where float32 stands in for the GPU matmul's accumulator.

    python bench/gelu_epilogue_error.py --out bench/results/gelu-epilogue-error.md

For x [T, H] and weights of the BERT family's up projection (H -> 4H) rounded to bf16 or fp16:
  - two passes (what the engine runs without the epilogue): the matmul's output rounded to the
    dtype, then the erf GELU, rounded again;
  - cuBLASLt's epilogue (engine/rose/layers/fused.py linear_gelu): the tanh GELU on the float32
    accumulator, rounded once;
  - an erf epilogue, for scale: the erf GELU on the accumulator, rounded once.
Each against the erf GELU of the float32 product: relative RMS error and max abs error.
tests/test_fused_gpu.py checks the same ordering on the GPU's own matmul.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import machine_description, publish  # noqa: E402


def _errors(got: torch.Tensor, exact: torch.Tensor) -> tuple[float, float]:
    rms = ((got - exact).pow(2).mean() / exact.pow(2).mean()).sqrt().item()
    return rms, (got - exact).abs().max().item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.manual_seed(0)
    rows = []
    for dtype in (torch.bfloat16, torch.float16):
        for hidden in (384, 768, 1024):
            x = torch.randn(args.tokens, hidden).to(dtype)
            weight = (torch.randn(4 * hidden, hidden) / hidden ** 0.5).to(dtype)
            bias = (0.1 * torch.randn(4 * hidden)).to(dtype)
            accumulator = F.linear(x.float(), weight.float(), bias.float())
            exact = F.gelu(accumulator)
            ways = {
                "two passes": F.gelu(accumulator.to(dtype).float()).to(dtype).float(),
                "tanh epilogue": F.gelu(accumulator, approximate="tanh").to(dtype).float(),
                "erf epilogue": exact.to(dtype).float(),
            }
            errors = {name: _errors(got, exact) for name, got in ways.items()}
            ratio = errors["tanh epilogue"][0] / errors["two passes"][0]
            rows.append(f"| {str(dtype).removeprefix('torch.')} | {hidden} | "
                        + " | ".join(f"{rms:.6f} / {peak:.4f}" for rms, peak in errors.values()) + f" | {ratio:.3f} |")
            print(rows[-1], flush=True)
    lines = [
        "# The up projection's GELU: two passes against an epilogue, each against float32",
        "",
        f"- command: `python bench/gelu_epilogue_error.py --tokens {args.tokens}`",
        f"- machine: {machine_description()}",
        f"- date: {datetime.date.today().isoformat()}",
        "- relative RMS error / max abs error against the erf GELU of the float32 product; ratio: tanh epilogue "
        "over two passes (below 1: the epilogue is closer)",
        "",
        "| dtype | hidden | two passes | tanh epilogue | erf epilogue | ratio |",
        "|---|---:|---:|---:|---:|---:|",
        *rows,
    ]
    publish("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
