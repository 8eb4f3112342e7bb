"""The CPU attention backends alone, on packed streams of embedder-like lengths: the native kernels
(engine/rose/attention/native/attention_bf16.c and attention_f32.c) against grouped SDPA (torch's CPU
flash attention on length-sorted padded groups), in bf16 and float32, the same q, k and v,
rounds in rotated order.

    python bench/cpu_attention.py --out bench/results/cpu/cpu-attention.md

Each shape's stream holds --num-seqs sequences with lognormal lengths (median --median-len
tokens, capped at 512); q, k and v are views into one fused projection, as the models slice
them. Error: the largest and mean absolute difference from float32 SDPA on each sequence.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib.common import machine_description, publish  # noqa: E402
from rose_embed.engine.rose.attention.ragged import AttentionShape, SDPAPerSequenceBackend  # noqa: E402
from rose_embed.engine.rose.attention.cpu import GroupedSDPABackend  # noqa: E402
from rose_embed.engine.rose.attention.cpu_native import NativeCPUAttentionBackend  # noqa: E402

SHAPES = {  # name: (heads, kv heads, head size, causal)
    "MiniLM / BERT-small (12 x 32)": (12, 12, 32, False),
    "BERT-base (12 x 64)": (12, 12, 64, False),
    "Qwen3-0.6B, causal, GQA (16 x 128, 8 kv)": (16, 8, 128, True),
}


def packed_qkv(shape: AttentionShape, lengths: list[int], generator: torch.Generator,
               dtype: torch.dtype = torch.bfloat16):
    """Random q, k, v for sequences of `lengths` as views into one fused qkv projection (as the
    models slice them), and the stream's cu_seqlens."""
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    q_width, kv_width = shape.num_heads * shape.head_dim, shape.num_kv_heads * shape.head_dim
    qkv = torch.randn(cu[-1], q_width + 2 * kv_width, generator=generator).to(dtype)
    q = qkv[:, :q_width].view(-1, shape.num_heads, shape.head_dim)
    k = qkv[:, q_width:q_width + kv_width].view(-1, shape.num_kv_heads, shape.head_dim)
    v = qkv[:, q_width + kv_width:].view(-1, shape.num_kv_heads, shape.head_dim)
    return q, k, v, cu


def stream(shape: AttentionShape, num_seqs: int, median_len: int, generator: torch.Generator,
           dtype: torch.dtype = torch.bfloat16):
    lengths = torch.distributions.LogNormal(torch.log(torch.tensor(float(median_len))), 0.6).sample((num_seqs,))
    lengths = lengths.round().clamp(1, 512).int().tolist()
    return (*packed_qkv(shape, lengths, generator, dtype), lengths)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-seqs", type=int, default=1000)
    parser.add_argument("--median-len", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rows = []
    for (name, (heads, kv_heads, head_dim, causal)), dtype_name in itertools.product(SHAPES.items(),
                                                                                    args.dtypes.split(",")):
        dtype = getattr(torch, dtype_name)
        shape = AttentionShape(heads, kv_heads, head_dim, causal)
        q, k, v, cu, lengths = stream(shape, args.num_seqs, args.median_len, torch.Generator().manual_seed(0), dtype)
        reference = SDPAPerSequenceBackend(shape)
        exact = reference.forward(q.double(), k.double(), v.double(), reference.prepare(None, cu, max(lengths)))
        backends = {"native": NativeCPUAttentionBackend(shape, dtype), "grouped SDPA": GroupedSDPABackend(shape)}
        metas = {label: b.prepare(None, cu, max(lengths)) for label, b in backends.items()}
        errors = {}
        for label, backend in backends.items():
            error = (backend.forward(q, k, v, metas[label]).double() - exact).abs()
            errors[label] = (error.max().item(), error.mean().item())
        seconds = {label: [] for label in backends}
        labels = list(backends)
        for r in range(args.rounds):
            for label in labels[r % 2:] + labels[:r % 2]:
                started = time.perf_counter()
                backends[label].forward(q, k, v, metas[label])
                seconds[label].append(time.perf_counter() - started)
        flops = sum(n * n for n in lengths) * heads * head_dim * 4 / (2 if causal else 1)
        base = statistics.median(seconds["grouped SDPA"])
        for label in labels:
            median = statistics.median(seconds[label])
            rows.append(f"| {name} | {dtype_name} | {label} | {median * 1e3:.1f} | {flops / median / 1e9:.0f} | "
                        f"{base / median:.2f}x | {errors[label][0]:.2e} / {errors[label][1]:.2e} |")
        print(rows[-2], rows[-1], sep="\n", flush=True)
    lines = ["# CPU attention: the native kernels against grouped SDPA", "",
             f"- command: `python bench/cpu_attention.py {' '.join(sys.argv[1:])}`",
             f"- machine: {machine_description()}; {args.threads} threads; "
             f"date {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
             f"- stream: {args.num_seqs} sequences, lognormal lengths with median {args.median_len} tokens "
             "(sigma 0.6, 1 to 512), random q, k, v as views of one fused projection; median of "
             f"{args.rounds} rounds in rotated order",
             "- GFLOP/s: the useful multiply-adds (q.k and p.v of every allowed pair, x2), not padded ones",
             "- error against float64 SDPA on each sequence: largest / mean absolute difference",
             "", "| shape | dtype | backend | ms | GFLOP/s | x grouped SDPA | error max / mean |",
             "|---|---|---|---|---|---|---|",
             *rows]
    publish("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
