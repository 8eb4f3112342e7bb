"""FP8 GEMM scalings on the GPU, one linear at a time: which torch._scaled_mm takes on this GPU,
how fast each is against bf16, and how far each lands from float32.

    python3 bench/probes/fp8_scaling_probe.py --out bench/results/fp8/fp8-scaling-probe.md

Why: rowwise activation scales need a token's whole row, so the kernels that produce an
activation a tile at a time (the attention per head, a GEMM's epilogue per column tile) cannot
quantize it themselves, and pay a pass of their own (bench/results/fp8/README.md). Scales per 128 columns of a
row (1x128, DeepSeek's layout) can be written by such a kernel, if the GEMM that reads them is
fast enough. This measures that GEMM (activations 1x128, weights 128x128 or 1x128) beside the
rowwise one the engine runs, on the linear shapes of BERT-base, Qwen3-0.6B and Qwen3-4B.

Each variant quantizes the same bf16 activations (normal, with a few large channels, as a
norm's output has) and weights (normal); quality is the least row cosine of the bf16 output
against the float32 product of the unquantized operands.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.lib.common import publish  # noqa: E402

E4M3_MAX = 448.0
LINEARS = {  # shape: [(name, in features K, out features N)]
    "bert-base": [("qkv", 768, 2304), ("o", 768, 768), ("up", 768, 3072), ("down", 3072, 768)],
    "qwen3-0.6b": [("qkv", 1024, 4096), ("o", 2048, 1024), ("gate_up", 1024, 6144), ("down", 3072, 1024)],
    "qwen3-4b": [("qkv", 2560, 6144), ("o", 4096, 2560), ("gate_up", 2560, 19456), ("down", 9728, 2560)],
}


def quantize(x: torch.Tensor, rows: int, cols: int) -> tuple[torch.Tensor, torch.Tensor]:
    """e4m3 values and float32 scales (value = e4m3 * scale) of x [R, C] in blocks of rows x cols
    (cols = C: one scale per row block)."""
    r, c = x.shape
    blocks = x.float().reshape(r // rows, rows, c // cols, cols)
    scale = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-12) / E4M3_MAX  # [R / rows, C / cols]
    q = (blocks / scale[:, None, :, None]).to(torch.float8_e4m3fn).reshape(r, c)
    return q, scale


def outer_major(scale: torch.Tensor) -> torch.Tensor:
    """The same scales laid out column-major, as cuBLAS's 1x128 scaling reads them."""
    return scale.t().contiguous().t()


def padded_columns(scale: torch.Tensor, multiple: int = 4) -> torch.Tensor:
    """128x128 scales [N/128, K/128] with K/128 padded to a multiple of 4, as cuBLAS reads them."""
    missing = -scale.shape[1] % multiple
    return torch.cat([scale, scale.new_ones(scale.shape[0], missing)], dim=1) if missing else scale


def blockwise_calls(xb, xbs, wq, ws, recipe_b: str) -> dict:
    """Candidate calls for one blockwise scaling, by the scale layout each tries: torch's API has
    moved between releases, and the probe reports whichever this torch takes."""
    calls = {}
    scaled_mm = getattr(torch.nn.functional, "scaled_mm", None)
    if scaled_mm is not None and hasattr(torch.nn.functional, "ScalingType"):
        kinds = torch.nn.functional.ScalingType
        b_scale = outer_major(ws) if recipe_b == "1x128" else padded_columns(ws).t()
        b_kind = kinds.BlockWise1x128 if recipe_b == "1x128" else kinds.BlockWise128x128
        calls["F.scaled_mm"] = lambda: scaled_mm(xb, wq.t(), scale_a=outer_major(xbs), scale_recipe_a=kinds.BlockWise1x128,
                                                 scale_b=b_scale, scale_recipe_b=b_kind, output_dtype=torch.bfloat16)
    if recipe_b == "1x128":
        layouts = {"scale_b [N, K/128] column-major": outer_major(ws), "scale_b [K/128, N]": ws.t().contiguous(),
                   "scale_b [K/128, N] view": outer_major(ws).t()}
    else:
        layouts = {"scale_b [L4, N/128]": padded_columns(ws).t(), "scale_b [K/128, N/128]": ws.t(),
                   "scale_b [N/128, L4]": padded_columns(ws)}
    for name, b_scale in layouts.items():
        calls[f"_scaled_mm, {name}"] = lambda b_scale=b_scale: torch._scaled_mm(
            xb, wq.t(), scale_a=outer_major(xbs), scale_b=b_scale, out_dtype=torch.bfloat16)
    return calls


def variants(x: torch.Tensor, w: torch.Tensor) -> dict:
    """name -> candidate calls computing x @ w.T in bf16 (weights [N, K]), the first that runs wins."""
    out = {"bf16": {"F.linear": lambda: torch.nn.functional.linear(x, w)}}
    xq, xs = quantize(x, 1, x.shape[1])
    wq, ws = quantize(w, 1, w.shape[1])
    for fast in (True, False):
        out[f"rowwise, {'fast' if fast else 'promoted'} accumulation"] = {"_scaled_mm": (
            lambda fast=fast: torch._scaled_mm(xq, wq.t(), scale_a=xs, scale_b=ws.t(), out_dtype=torch.bfloat16,
                                               use_fast_accum=fast))}
    xb, xbs = quantize(x, 1, 128)  # [M, K/128]
    out["1x128 activations, 128x128 weights"] = blockwise_calls(xb, xbs, *quantize(w, 128, 128), "128x128")
    out["1x128 activations, 1x128 weights"] = blockwise_calls(xb, xbs, *quantize(w, 1, 128), "1x128")
    return out


def time_ms(fn, iters: int = 50) -> float:
    for _ in range(5):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    generator = torch.Generator(device="cuda").manual_seed(0)
    rows, errors = [], {}
    for shape, linears in LINEARS.items():
        for name, k, n in linears:
            x = torch.randn(args.tokens, k, device="cuda", generator=generator)
            x[:, :: max(1, k // 8)] *= 20  # a few large channels, as a norm's gains make them
            x = x.bfloat16()
            w = (torch.randn(n, k, device="cuda", generator=generator) * k ** -0.5).bfloat16()
            exact = x.float() @ w.float().t()
            base = None
            for label, candidates in variants(x, w).items():
                tried = []
                for how, fn in candidates.items():
                    try:
                        got = fn()
                        cosine = torch.nn.functional.cosine_similarity(got.float(), exact, dim=1).min().item()
                        if cosine < 0.9:  # ran, but read the scales in another layout than they were written
                            raise ValueError(f"min row cosine {cosine:.3f}")
                        ms = time_ms(fn)
                        break
                    except Exception as error:  # a call or layout this torch or GPU does not take
                        tried.append(f"{how}: {type(error).__name__}: {str(error).splitlines()[0][:140]}")
                else:
                    errors[f"{shape} {name}, {label}"] = tried
                    rows.append(f"| {shape} {name} ({k} x {n}) | {label} | refused | | | |")
                    continue
                base = ms if label == "bf16" else base
                rows.append(f"| {shape} {name} ({k} x {n}) | {label} | {ms * 1e3:.0f} | {base / ms:.2f}x | "
                            f"{cosine:.5f} | {how} |")
            print("\n".join(rows[-5:]), flush=True)
    lines = ["# FP8 GEMM scalings against bf16, one linear at a time", "",
             f"- command: `python3 bench/probes/fp8_scaling_probe.py {' '.join(sys.argv[1:])}`",
             f"- GPU: {torch.cuda.get_device_name()}; torch {torch.__version__}; "
             f"date {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
             f"- M = {args.tokens} tokens; activations normal with every (K/8)th channel x20, weights normal; "
             "time: CUDA events over 50 calls after 5; quality: least row cosine against the float32 product",
             "", "| linear | scaling | us | x bf16 | min row cosine | call |", "|---|---|---|---|---|---|", *rows]
    if errors:
        lines += ["", "Refusals (each call tried):"]
        for label, tried in errors.items():
            lines += [f"- {label}:", *[f"  - `{t}`" for t in tried]]
    publish("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
