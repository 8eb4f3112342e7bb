"""Does FlashAttention 4 (`flash_attn.cute`, written in the CuTe DSL) run on this GPU, and does it
beat the engine's attention backends on the batches the engine serves?

    python3 bench/fa4_probe.py --out bench/results/fa4-probe.md     # CUDA, flash_attn.cute importable

For the attention of each model shape (MiniLM 12 x 32, BERT-base 12 x 64, Qwen3-0.6B 16 / 8 x
128 causal) and each graph class (16,384 or 2,048 tokens; longest sequence 128 or 512), on the
batch that `auto` times (engine/rose/attention_timing.py):
  - FA4's `flash_attn_varlen_func` against varlen's output on the same q, k, v (max abs difference);
  - FA4, varlen and the packed kernel each timed as `auto` times a backend: captured in a CUDA
    graph, best replay, microseconds per layer call.
A failure (the import, a head_dim, the graph capture) is reported in its cell, not raised.
docs/gpu.md says how FA4 and its CuTe DSL wheels reach the H200.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import publish  # noqa: E402
from engine.rose.attention_timing import AttentionTimer, padded_cu_seqlens  # noqa: E402
from engine.rose.layers.attention import AttentionShape, make_attention_backend  # noqa: E402
from engine.rose.layers.attention_cuda import VarlenMeta  # noqa: E402

SHAPES = {
    "minilm": AttentionShape(12, 12, 32, False),
    "bert-base": AttentionShape(12, 12, 64, False),
    "qwen3-0.6b": AttentionShape(16, 8, 128, True),
}
CLASSES = [(16384, 128), (16384, 512), (2048, 128), (2048, 512)]
MAX_NUM_SEQS = 1024


class FA4Backend:
    """FA4's varlen forward behind the interface AttentionTimer drives."""

    name = "fa4"

    def __init__(self, shape: AttentionShape):
        from flash_attn.cute import flash_attn_varlen_func

        self.shape, self._fn = shape, flash_attn_varlen_func

    def prepare_graph(self, key, cu_seqlens: torch.Tensor, cu_seqlens_host: list[int], max_seqlen: int) -> VarlenMeta:
        return VarlenMeta(cu_seqlens, max_seqlen)

    def forward(self, q, k, v, meta: VarlenMeta, local: bool = False, position_bias=None) -> torch.Tensor:
        out, _ = self._fn(q, k, v, cu_seqlens_q=meta.cu_seqlens, cu_seqlens_k=meta.cu_seqlens,
                          max_seqlen_q=meta.max_seqlen, max_seqlen_k=meta.max_seqlen,
                          softmax_scale=self.shape.scale, causal=self.shape.is_causal)
        return out


def _failure(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"


@torch.inference_mode()
def probe(name: str, shape: AttentionShape) -> list[str]:
    device = torch.device("cuda")
    backends = {"varlen": make_attention_backend("varlen", shape, device, torch.bfloat16),
                "packed": make_attention_backend("packed", shape, device, torch.bfloat16)}
    try:
        backends["fa4"] = FA4Backend(shape)
    except Exception as exc:
        return [f"| {name} | all | - | - | - | FA4 import failed: {_failure(exc)} |"]
    timer = AttentionTimer(shape, torch.bfloat16, device, max(t for t, _ in CLASSES), MAX_NUM_SEQS)
    rows = []
    for num_tokens, max_seqlen in CLASSES:
        cu_host = padded_cu_seqlens(num_tokens, max_seqlen, MAX_NUM_SEQS)
        meta = VarlenMeta(torch.tensor(cu_host, dtype=torch.int32, device=device), max_seqlen)
        q, k, v = timer.q[:num_tokens], timer.k[:num_tokens], timer.v[:num_tokens]
        try:
            difference = (backends["fa4"].forward(q, k, v, meta).float()
                          - backends["varlen"].forward(q, k, v, meta).float()).abs().max().item()
            check = f"{difference:.4f}"
        except Exception as exc:
            traceback.print_exc()
            check = _failure(exc)
        times = {}
        for label, backend in backends.items():
            try:
                times[label] = f"{1e6 * timer(backend, num_tokens, max_seqlen):.1f}"
            except Exception as exc:
                traceback.print_exc()
                times[label] = _failure(exc)
        rows.append(f"| {name} | {num_tokens} / {max_seqlen} | {times['varlen']} | {times['packed']} | "
                    f"{times['fa4']} | {check} |")
        print(rows[-1], flush=True)
    del timer
    torch.cuda.empty_cache()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(SHAPES))
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("fa4_probe: needs a CUDA device")
    lines = [
        "# FlashAttention 4 (CuTe DSL) against the engine's attention backends",
        "",
        f"- command: `python3 bench/fa4_probe.py {' '.join(sys.argv[1:])}`",
        f"- GPU: {torch.cuda.get_device_name()}; torch {torch.__version__}; "
        f"date {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
        "- bf16; each class's batch as `auto` times it; us per layer call, best CUDA-graph replay; "
        "max |FA4 - varlen| on that batch",
        "",
        "| model | tokens / longest | varlen us | packed us | FA4 us | max abs diff FA4 vs varlen |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name in args.models.split(","):
        lines += probe(name, SHAPES[name])
    publish("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
