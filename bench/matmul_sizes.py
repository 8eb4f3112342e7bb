"""A model's matmuls at the token counts around the top bucket, run alone and inside a CUDA graph.

    python3 bench/matmul_sizes.py --out bench/results/matmul-sizes.md

Inside the engine's graphs cuBLAS ran other GEMM kernels for the 16,384-token bucket than
the eager profile ran for the batch's own 16,058 tokens, and slower ones
(`bench/results/gpu-profile-in-graph.md`). Per model shape (MiniLM, BERT-base, the Qwen3-0.6B
shape: each layer's linears, bf16, the BERT family's up projection with its GELU as the engine
runs it), this times one layer's matmuls at each token count, eagerly and as a captured
graph, and names the GEMM kernel cuBLAS ran for the largest: which bucket sizes cuBLAS
serves well, and whether capture itself changes its choice.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import capture_graph, cuda_event_ms, publish  # noqa: E402
from engine.rose.layers import fused  # noqa: E402

# (in, out) per linear of one layer, and which one takes the GELU (the BERT family's up projection).
LAYERS = {
    "minilm": ([(384, 1152), (384, 384), (384, 1536), (1536, 384)], 2),
    "bert-base": ([(768, 2304), (768, 768), (768, 3072), (3072, 768)], 2),
    "qwen3-0.6b": ([(1024, 4096), (2048, 1024), (1024, 6144), (3072, 1024)], None),
}
TOKENS = [15360, 15872, 16058, 16128, 16256, 16320, 16384]
ITERS = 20


def layer_step(shape: list[tuple[int, int]], gelu_at: int | None, num_tokens: int):
    weights = [(torch.randn(out, inp, device="cuda", dtype=torch.bfloat16) * inp ** -0.5,
                torch.zeros(out, device="cuda", dtype=torch.bfloat16)) for inp, out in shape]
    inputs = [torch.randn(num_tokens, inp, device="cuda", dtype=torch.bfloat16) for inp, _ in shape]

    def step():
        for i, ((weight, bias), x) in enumerate(zip(weights, inputs)):
            if i == gelu_at:
                fused.linear_gelu(x, weight, bias, "none")
            else:
                torch.nn.functional.linear(x, weight, bias)
    return step


def gemm_kernels(run) -> list[str]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA and "Memset" not in e.name]


@torch.inference_mode()
def measure(name: str) -> list[str]:
    shape, gelu_at = LAYERS[name]
    rows = []
    for num_tokens in TOKENS:
        step = layer_step(shape, gelu_at, num_tokens)
        eager = cuda_event_ms(step, ITERS)
        graph = capture_graph(step)
        captured = cuda_event_ms(graph.replay, ITERS)
        same = gemm_kernels(step) == gemm_kernels(graph.replay)
        rows.append(f"| {num_tokens} | {1e3 * eager:.1f} | {1e3 * captured:.1f} | "
                    f"{num_tokens / eager / 1e3:.2f} | {num_tokens / captured / 1e3:.2f} | "
                    f"{'yes' if same else 'NO'} | {', '.join(k[:40] for k in gemm_kernels(graph.replay))} |")
        print(name, rows[-1], flush=True)
        del graph
    return [f"## {name}: one layer's linears {shape}" + (f", GELU on the linear {gelu_at}" if gelu_at is not None else ""),
            "", "| tokens | eager us | in a graph us | eager M tok/s | graph M tok/s | same kernels | kernels in the graph |",
            "| ---: | ---: | ---: | ---: | ---: | --- | --- |", *rows, ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="bert-base,qwen3-0.6b,minilm")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    lines = ["# Matmuls at the token counts around the top bucket", "",
             f"- command: `python3 bench/matmul_sizes.py {' '.join(sys.argv[1:])}`",
             f"- GPU: {torch.cuda.get_device_name()}; torch {torch.__version__}; date {datetime.date.today()}",
             f"- bf16, random weights; median of {ITERS} timings by CUDA events", ""]
    for name in args.models.split(","):
        lines += measure(name)
        publish("\n".join(lines) + "\n", args.out)  # after each model: a call cut short keeps the models done


if __name__ == "__main__":
    main()
