"""Each pass of one layer against its hardware floor, on the H200: which part of a batch is at
the limit of the GPU and which is not.

    python3 bench/kernel_floors.py --out bench/results/gpu/kernel-floors.md

For MiniLM, BERT-base and the Qwen3-0.6B shape at the top bucket (16,384 tokens), every pass
the engine's graph runs per layer is timed alone with the engine's own functions (the
matmuls with their weights' shapes, GELU in the up projection's epilogue as the engine runs
it, the fused Triton norms and activations, the packed attention at its default launch on
`auto`'s two classes of texts and on gpu_bench's documents). Each is set against its floor:
the bytes it must read and write at the H200's data-sheet bandwidth, or its FLOPs at its
data-sheet dense bf16 rate, whichever is longer. "x floor" is how far above that a pass
runs. What the hardware gives in practice is below the data sheet; the report also gives
this run's rates of a large copy and of a large square matmul for scale. A pass near the
practical rate cannot get faster on its own, only by being folded into another. Timed by
CUDA events around a CUDA graph of many calls (bench.lib.common.cuda_event_ms).

Rows marked "(not in the engine)" time another way of a pass (the Qwen3 shape's residual
added in the down projection's cuBLAS epilogue, and the norm after it reading one tensor
instead of two: it lost, bench/results/gpu/README.md); they are left out of the layer's sum. Once per
batch, the mean pooling's per-segment sums are timed too, the Triton pass against index_add_.

A pass called again and again on the same inputs may find its weights and part of its
inputs still in L2, which a whole model, whose every layer has its own, does not:
`--cold` gives each pass several sets of inputs and weights taken in turn.

Results in bench/results/ (`bench/gpu_session.sh kernels` runs both):
  kernel-floors.md       python3 bench/kernel_floors.py --out bench/results/gpu/kernel-floors.md
  kernel-floors-cold.md  python3 bench/kernel_floors.py --cold --out bench/results/gpu/kernel-floors-cold.md
"""

from __future__ import annotations

import argparse
import datetime
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib.common import capture_graph, cuda_event_ms, publish  # noqa: E402
from rose_embed.engine.rose.layers import fused  # noqa: E402
from rose_embed.engine.rose.attention.ragged import AttentionShape  # noqa: E402
from rose_embed.engine.rose.attention.choice import representative_lengths  # noqa: E402
from rose_embed.engine.rose.attention.cuda import PackedAttentionBackend  # noqa: E402

TOKENS = 16384
CALLS_PER_GRAPH = 24
ALTERNATIVE = "(not in the engine) "  # rows that time another way of a pass, left out of the layer's sum
COLD_COPIES = 8  # input sets per pass with --cold: together several times the H200's 60 MB of L2
DTYPE = torch.bfloat16
BYTES = 2  # per bf16 element
# The H200 SXM's data sheet: HBM3e bandwidth, dense bf16 tensor-core rate.
PEAK_BYTES_PER_S = 4.8e12
PEAK_FLOP_PER_S = 989e12


@dataclass(frozen=True)
class Shape:
    hidden: int
    intermediate: int
    layers: int
    attention: AttentionShape
    decoder: bool  # pre-norm SwiGLU with q/k norm and rotary (Qwen3) or post-norm GELU (BERT)


SHAPES = {
    "minilm": Shape(384, 1536, 6, AttentionShape(12, 12, 32, False), False),
    "bert-base": Shape(768, 3072, 12, AttentionShape(12, 12, 64, False), False),
    "qwen3-0.6b": Shape(1024, 3072, 28, AttentionShape(16, 8, 128, True), True),
}


def graph_ms(fns) -> float:
    """Milliseconds per call, replayed as a CUDA graph of CALLS_PER_GRAPH calls that take the
    callables of `fns` (one, or a list of the same pass on other inputs) in turn."""
    fns = fns if isinstance(fns, list) else [fns]

    def calls():
        for i in range(CALLS_PER_GRAPH):
            fns[i % len(fns)]()

    return cuda_event_ms(capture_graph(calls).replay, repeats=10) / CALLS_PER_GRAPH


def measured_peaks() -> tuple[float, float]:
    """(bytes/s of a device-to-device copy that both reads and writes 1 GiB, FLOP/s of a bf16
    8192-cubed matmul) on this GPU in this run: what the data sheet's rates give in practice."""
    src = torch.empty(2**29, dtype=DTYPE, device="cuda")
    dst = torch.empty_like(src)
    copy_s = graph_ms(lambda: dst.copy_(src)) / 1e3
    a = torch.randn(8192, 8192, dtype=DTYPE, device="cuda")
    b = torch.randn(8192, 8192, dtype=DTYPE, device="cuda")
    matmul_s = graph_ms(lambda: a @ b) / 1e3
    return 2 * 2**29 * BYTES / copy_s, 2 * 8192**3 / matmul_s


def passes(shape: Shape) -> list[tuple[str, object, int, int]]:
    """(name, call, bytes it must move, FLOPs) for every pass of one layer except attention."""
    t, h, i = TOKENS, shape.hidden, shape.intermediate
    a = shape.attention
    qkv_width = (a.num_heads + 2 * a.num_kv_heads) * a.head_dim
    attn_width = a.num_heads * a.head_dim
    g = torch.Generator(device="cuda").manual_seed(0)

    def rand(*size):
        return torch.randn(*size, generator=g, device="cuda", dtype=DTYPE) * 0.05

    def matmul(k: int, n: int, bias: bool, gelu: bool = False, residual: bool = False):
        x, w, b = rand(t, k), rand(n, k), rand(n) if bias else None
        if residual:
            r = rand(t, n)
            return lambda: torch.addmm(r, x, w.t()), (t * k + k * n + 2 * t * n) * BYTES, 2 * t * k * n
        call = (lambda: fused.linear_gelu(x, w, b, "none")) if gelu else (lambda: torch.nn.functional.linear(x, w, b))
        return call, (t * k + k * n + t * n) * BYTES, 2 * t * k * n

    x, residual, weight, bias = rand(t, h), rand(t, h), rand(h), rand(h)
    rows = [("qkv projection", *matmul(h, qkv_width, not shape.decoder)),
            ("output projection", *matmul(attn_width, h, not shape.decoder))]
    if shape.decoder:
        qkv, gate_up = rand(t, qkv_width), rand(t, 2 * i)
        positions = torch.arange(t, device="cuda") % 512
        cos, sin = rand(4096, a.head_dim // 2), rand(4096, a.head_dim // 2)
        norm_w = rand(a.head_dim)
        kernels = fused._triton_kernels()
        rows += [
            ("q/k norm + rotary + v split", lambda: kernels.qk_norm_rope(
                qkv, positions, cos, sin, norm_w, norm_w, a.num_heads, a.num_kv_heads, a.head_dim, 1e-6),
             2 * t * qkv_width * BYTES, 0),
            ("add + RMSNorm (x2)", lambda: fused.rms_norm(x, weight, 1e-6, residual), 4 * t * h * BYTES, 0),
            ("gate/up projection", *matmul(h, 2 * i, False)),
            ("SiLU and multiply", lambda: fused.act_and_mul(gate_up), 3 * t * i * BYTES, 0),
            ("down projection", *matmul(i, h, False)),
            # Not in the engine: the residual added in the projection's cuBLAS epilogue (C of
            # addmm), so that the norm after it reads one tensor instead of two.
            (f"{ALTERNATIVE}down projection + residual in its epilogue", *matmul(i, h, False, residual=True)),
            (f"{ALTERNATIVE}RMSNorm alone, its input holding the residual", lambda: fused.rms_norm(x, weight, 1e-6),
             2 * t * h * BYTES, 0),
        ]
    else:
        rows += [
            ("add + LayerNorm (x2)", lambda: fused.add_layer_norm(x, residual, weight, bias, 1e-12), 3 * t * h * BYTES,
             0),
            ("up projection + GELU epilogue", *matmul(h, i, True, gelu=True)),
            ("down projection", *matmul(i, h, True)),
        ]
    return rows


def attention_workloads() -> dict[str, np.ndarray]:
    """Lengths filling the top bucket: `auto`'s two classes (log-uniform from 8 up to 128 or
    512 tokens) and gpu_bench's documents (lognormal, median 128, clipped to 8..512)."""
    rng = np.random.default_rng(0)
    docs = np.clip(rng.lognormal(np.log(128), 0.75, 4096), 8, 512).astype(np.int64)
    docs = docs[:np.searchsorted(np.cumsum(docs), TOKENS, side="right")]
    return {"texts <= 128": np.asarray(representative_lengths(TOKENS, 128, 1024)),
            "texts <= 512": np.asarray(representative_lengths(TOKENS, 512, 1024)),
            "documents": docs}


def model_qkv(shape: Shape, num_tokens: int) -> list[torch.Tensor]:
    """q, k and v as the model hands them to the attention: views into the fused projection
    (the decoder's come contiguous out of its q/k norm)."""
    a = shape.attention
    widths = [a.num_heads * a.head_dim, a.num_kv_heads * a.head_dim, a.num_kv_heads * a.head_dim]
    qkv = torch.randn(num_tokens, sum(widths), device="cuda", dtype=DTYPE)
    return [x.contiguous() if shape.decoder else x
            for x in (t.view(num_tokens, -1, a.head_dim) for t in qkv.split(widths, dim=-1))]


def packed_backend(shape: Shape, lengths: np.ndarray) -> tuple[PackedAttentionBackend, object]:
    """The packed attention at its default launch, prepared for one batch of these lengths."""
    cu_host = np.concatenate([[0], np.cumsum(lengths)]).tolist()
    cu = torch.tensor(cu_host, dtype=torch.int32, device="cuda")
    backend = PackedAttentionBackend(shape.attention)
    return backend, backend.prepare(cu, cu_host, int(lengths.max()))


def attention_rows(shape: Shape, copies: int) -> list[tuple[str, float, int, int]]:
    """(name, ms, bytes, FLOPs) of the packed attention at its default launch, per workload,
    on q, k and v as the model hands them over (`model_qkv`), taking `copies` sets of them in turn."""
    a = shape.attention
    rows = []
    for name, lengths in attention_workloads().items():
        lengths = lengths.astype(np.int64)
        num_tokens = int(lengths.sum())
        inputs = [model_qkv(shape, num_tokens) for _ in range(copies)]
        backend, meta = packed_backend(shape, lengths)
        # Scores and the weighted sum: 2 matmuls of 2 FLOPs per (query, key, dim); causal: half the pairs.
        pairs = int((lengths * (lengths + 1) // 2).sum() if a.is_causal else (lengths**2).sum())
        flops = 4 * pairs * a.head_dim * a.num_heads
        moved = num_tokens * (2 * a.num_heads + 2 * a.num_kv_heads) * a.head_dim * BYTES  # q, k, v in; out
        ms = graph_ms([lambda q=q, k=k, v=v: backend.forward(q, k, v, meta) for q, k, v in inputs])
        rows.append((f"attention, {name} ({num_tokens:,} tokens, mean {lengths.mean():.0f})", ms, moved, flops))
    return rows


def floor_table(shape: Shape, copies: int) -> list[str]:
    sets = [passes(shape) for _ in range(copies)]
    measured = [(name, graph_ms([s[j][1] for s in sets]), moved, flops)
                for j, (name, _, moved, flops) in enumerate(sets[0])]
    del sets
    measured += attention_rows(shape, copies)
    lines = ["| pass | us | floor us | bound by | GB/s | TFLOP/s | x floor |",
             "| --- | ---: | ---: | --- | ---: | ---: | ---: |"]
    total = floor_total = 0.0
    for name, ms, moved, flops in measured:
        memory_ms, compute_ms = 1e3 * moved / PEAK_BYTES_PER_S, 1e3 * flops / PEAK_FLOP_PER_S
        floor_ms = max(memory_ms, compute_ms)
        times = 2 if "(x2)" in name else 1
        if not name.startswith(("attention", ALTERNATIVE)) or name.startswith("attention, documents"):
            total += times * ms
            floor_total += times * floor_ms
        lines.append(f"| {name} | {1e3 * ms:.1f} | {1e3 * floor_ms:.1f} | "
                     f"{'memory' if memory_ms >= compute_ms else 'compute'} | {moved / ms / 1e6:,.0f} | "
                     f"{flops / ms / 1e9:.0f} | {ms / floor_ms:.2f} |")
    lines += ["", f"One layer (attention on the documents, the norm twice): {1e3 * total:.0f} us, "
              f"its floor {1e3 * floor_total:.0f} us; x {shape.layers} layers: {shape.layers * total:.2f} ms "
              f"against {shape.layers * floor_total:.2f} ms.", ""]
    return lines


def pooling_table(shape: Shape) -> list[str]:
    """Once per batch, not per layer: mean pooling's per-segment sums over the top bucket, the
    Triton pass against index_add_ (the reference, and the engine's path before it), on the
    documents' and the short texts' segment layouts."""
    lines = ["Once per batch: mean pooling's per-segment sums (float32), us", "",
             "| segments | Triton pass | index_add_ | floor |", "| --- | ---: | ---: | ---: |"]
    for name, lengths in attention_workloads().items():
        if name == "texts <= 512":
            continue
        lengths = torch.as_tensor(lengths, device="cuda")
        num_tokens = int(lengths.sum())
        hidden = torch.randn(num_tokens, shape.hidden, device="cuda", dtype=DTYPE)
        index = torch.repeat_interleave(torch.arange(len(lengths), device="cuda"), lengths)
        rows = len(lengths) + 1
        fused_ms = graph_ms(lambda: fused.segment_sums(hidden, index, rows))
        fused.set_fused_kernels(False)
        try:
            reference_ms = graph_ms(lambda: fused.segment_sums(hidden, index, rows))
        finally:
            fused.set_fused_kernels(True)
        floor_ms = 1e3 * (hidden.numel() * BYTES + index.numel() * 8) / PEAK_BYTES_PER_S
        lines.append(f"| {name} ({len(lengths)} of them) | {1e3 * fused_ms:.1f} | {1e3 * reference_ms:.1f} | "
                     f"{1e3 * floor_ms:.1f} |")
    return lines + [""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(SHAPES))
    parser.add_argument("--out", type=Path)
    parser.add_argument("--cold", action="store_true",
                        help=f"each pass takes {COLD_COPIES} sets of inputs and weights in turn, so that none is "
                             "still in L2 from its last call, as in a whole model where every layer has its own")
    args = parser.parse_args()
    copies = COLD_COPIES if args.cold else 1
    bandwidth, flop_rate = measured_peaks()
    lines = ["# Each pass of one layer against its hardware floor", "",
             f"- command: `python3 bench/kernel_floors.py {' '.join(sys.argv[1:])}`",
             f"- GPU: {torch.cuda.get_device_name()}; torch {torch.__version__}; date {datetime.date.today()}",
             f"- bf16, {TOKENS:,} tokens (the top bucket), random weights; floors at the data sheet's "
             f"{PEAK_BYTES_PER_S / 1e9:,.0f} GB/s and {PEAK_FLOP_PER_S / 1e12:.0f} TFLOP/s; in this run a 1 GiB copy "
             f"moved {bandwidth / 1e9:,.0f} GB/s (read + write) and an 8192-cubed matmul ran at "
             f"{flop_rate / 1e12:.0f} TFLOP/s",
             "- GB/s and TFLOP/s: the bytes the pass must move and its FLOPs over its time",
             "- inputs and weights: " + (f"{COLD_COPIES} sets taken in turn (--cold)" if args.cold
                                         else "one set, called again and again"),
             ""]
    with torch.inference_mode():
        for name in args.models.split(","):
            shape = SHAPES[name]
            lines += [f"## {name}: hidden {shape.hidden}, intermediate {shape.intermediate}, {shape.layers} layers, "
                      f"heads {shape.attention.num_heads}/{shape.attention.num_kv_heads} x {shape.attention.head_dim}",
                      ""] + floor_table(shape, copies) + pooling_table(shape)
            torch.cuda.empty_cache()
    publish("\n".join(lines), args.out)


if __name__ == "__main__":
    main()
