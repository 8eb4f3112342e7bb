"""Does folding GELU into the up projection's epilogue pay? The BERT-family MLP's first half, timed three ways.

    python3 bench/mlp_epilogue.py --out bench/results/mlp-epilogue.md     # needs a CUDA device

For each shape (tokens x hidden -> 4 x hidden, bf16), one run times:
  - separate: cuBLAS matmul with bias (as the engine runs it), then the erf GELU as its own pass;
  - compiled: torch.compile(mode="max-autotune-no-cudagraphs") of the same two steps, which
    may pick a Triton matmul template with the GELU folded into its epilogue (exact erf GELU);
  - cuBLASLt epilogue: torch._addmm_activation(use_gelu=True), cuBLASLt's own GELU. On the CPU
    the same call gives the erf GELU exactly; on CUDA it may be the tanh approximation, which
    suits only models whose activation is `gelu_new` / `gelu_pytorch_tanh`: the error column tells.
Each is checked against the fp32 computation (max abs error), so that a faster path that
changes the numbers shows it. Times are CUDA-event medians over repeated calls.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import cuda_event_ms, publish  # noqa: E402

SHAPES = {"minilm": 384, "bert-base": 768, "bert-large": 1024}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--shapes", default="minilm,bert-base")
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile (its autotuning takes minutes)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    import torch
    import torch.nn.functional as F

    if not torch.cuda.is_available():
        sys.exit("mlp_epilogue: needs a CUDA device")
    torch.manual_seed(0)
    rows = ["| shape | path | ms | x separate | max abs error vs fp32 | GELU |", "|---|---|---:|---:|---:|---|"]
    for name in args.shapes.split(","):
        hidden = SHAPES[name]
        x = torch.randn(args.tokens, hidden, device="cuda", dtype=torch.bfloat16)
        weight = torch.randn(4 * hidden, hidden, device="cuda", dtype=torch.bfloat16) / hidden ** 0.5
        bias = torch.randn(4 * hidden, device="cuda", dtype=torch.bfloat16) * 0.1
        exact = F.gelu(F.linear(x.float(), weight.float(), bias.float()))

        def separate():
            return F.gelu(F.linear(x, weight, bias))

        def epilogue():
            return torch._addmm_activation(bias, x, weight.t(), use_gelu=True)

        paths = [("separate (cuBLAS + GELU pass)", separate, "erf")]
        if not args.no_compile:
            paths.append(("torch.compile max-autotune", torch.compile(separate, mode="max-autotune-no-cudagraphs"),
                          "erf"))
        paths.append(("cuBLASLt GELU epilogue", epilogue, "cuBLASLt's"))
        base = None
        for label, fn, gelu in paths:
            ms = cuda_event_ms(fn, args.repeats)
            base = base or ms
            error = (fn().float() - exact).abs().max().item()
            rows.append(f"| {name} ({args.tokens} x {hidden} -> {4 * hidden}) | {label} | {ms:.3f} | "
                        f"{base / ms:.2f} | {error:.4f} | {gelu} |")
            print(rows[-1], flush=True)
    report = "\n".join([
        "# GELU in the up projection's epilogue, or as its own pass",
        "",
        f"- command: `python3 bench/mlp_epilogue.py {' '.join(sys.argv[1:])}`",
        f"- GPU: {torch.cuda.get_device_name()}; torch {torch.__version__}; "
        f"date {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
        "- bf16 inputs; error against the same computation in fp32 with the erf GELU",
        "",
        *rows,
    ]) + "\n"
    publish(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
