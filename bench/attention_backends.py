"""Every attention backend the engine has, side by side per class of batch, in one run:
varlen (torch's FlashAttention 2), the packed Triton kernel at its default launch and, where
it is installed, FlashInfer (its `auto` picks the FlashAttention 3 Hopper kernels on sm_90).

    python3 bench/attention_backends.py --out bench/results/attention-backends.md

One layer's attention in microseconds per call, timed as `auto` times it at warm-up
(engine/attention_timing.py: CUDA graphs of many calls, best of several replays), on the four
classes `auto` times; each backend's output is checked against varlen's on one batch.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.attention_tiles import CLASSES, MAX_SEQS, SHAPES, check_batch  # noqa: E402
from bench.common import publish  # noqa: E402
from engine.attention_timing import AttentionTimer  # noqa: E402
from engine.layers.attention import AttentionShape  # noqa: E402
from engine.layers.attention_cuda import (  # noqa: E402
    FlashInferAttentionBackend,
    PackedAttentionBackend,
    VarlenAttentionBackend,
    flashinfer_available,
)


def backends(shape: AttentionShape) -> dict[str, object]:
    found = {"varlen": VarlenAttentionBackend(shape), "packed": PackedAttentionBackend(shape)}
    if flashinfer_available():
        try:
            found["flashinfer"] = FlashInferAttentionBackend(shape, torch.device("cuda"), torch.bfloat16)
        except ValueError as exc:  # a head_dim it has no kernels for
            print(f"flashinfer: {exc}", flush=True)
    return found


def largest_difference(shape: AttentionShape, found: dict[str, object]) -> dict[str, float]:
    """max |backend - varlen| on a batch of 2,048 tokens of texts up to 512."""
    cu, cu_host, q, k, v = check_batch(shape)
    outs = {}
    for name, backend in found.items():
        meta = backend.prepare(cu, cu_host, 512)
        outs[name] = backend.forward(q, k, v, meta).float()
        if name == "flashinfer":  # which of its kernel families its `auto` planned
            print(f"{shape}: flashinfer planned {getattr(meta, '_backend', 'unknown')}", flush=True)
    return {name: float((out - outs["varlen"]).abs().max()) for name, out in outs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--models", default=",".join(SHAPES), help="comma-separated, of " + ", ".join(SHAPES))
    args = parser.parse_args()
    lines = ["# The attention backends side by side", "",
             f"- command: `python3 bench/attention_backends.py {' '.join(sys.argv[1:])}`",
             f"- GPU: {torch.cuda.get_device_name()}; torch {torch.__version__}; date {datetime.date.today()}",
             "- bf16; us per layer call as `auto` times it; bold: the fastest per class; the last column: "
             "max |output - varlen's| on 2,048 tokens of texts up to 512", ""]
    for name in args.models.split(","):
        shape = SHAPES[name]
        found = backends(shape)
        timer = AttentionTimer(shape, torch.bfloat16, torch.device("cuda"), 16384, MAX_SEQS)
        times = {b: [timer(backend, tokens, longest) for tokens, longest in CLASSES] for b, backend in found.items()}
        for b, row in times.items():
            print(name, b, [round(1e6 * t, 1) for t in row], flush=True)
        differences = largest_difference(shape, found)
        best = [min(row[i] for row in times.values()) for i in range(len(CLASSES))]
        lines += [f"## {name} (head_dim {shape.head_dim}, {shape.num_heads} heads, {shape.num_kv_heads} kv heads"
                  f"{', causal' if shape.is_causal else ''})", "",
                  "| backend | " + " | ".join(f"{t} tok, <= {s}" for t, s in CLASSES) + " | max diff |",
                  "| --- |" + " ---: |" * len(CLASSES) + " ---: |"]
        for b, row in times.items():
            cells = [f"**{1e6 * t:.1f}**" if t == best[i] else f"{1e6 * t:.1f}" for i, t in enumerate(row)]
            lines.append(f"| {b} | " + " | ".join(cells) + f" | {differences[b]:.4f} |")
        lines.append("")
        del timer
        torch.cuda.empty_cache()
        publish("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
