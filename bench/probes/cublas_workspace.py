"""Should the engine's processes give cuBLAS no workspace (they do: engine/rose/cublas_workspace.py)? torch's GEMMs (bf16 linears, the
addmm with GELU, torch._scaled_mm) run at the algorithm cuBLAS's heuristic picks within the
workspace it is given, and on Hopper that algorithm comes with a memset before each GEMM, a node
of its own in a CUDA graph (bench/probes/fp8_gemm_algos.py); the best algorithm within no workspace has
none. torch reads those limits once per process, from CUBLASLT_WORKSPACE_SIZE (KiB, cuBLASLt)
and CUBLAS_WORKSPACE_CONFIG (cuBLAS), so each setting runs in a process of its own, the two
alternating, ROUNDS times: the engine (attention auto, CUDA graphs) in bf16 and with
--quantization fp8's default plan (weights rounded to nearest: speed does not depend on their
values) on the documents workload, and one 16-token query's latency in bf16.

Usage (on a GPU; bench/gpu_session.sh cublas-workspace):
  python3 bench/probes/cublas_workspace.py --out bench/results/gpu/cublas-workspace.md
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.lib.common import gpu_run_lines, publish  # noqa: E402

SETTINGS = {"cuBLAS's default workspace": {},
            "no workspace": {"CUBLASLT_WORKSPACE_SIZE": "0", "CUBLAS_WORKSPACE_CONFIG": ":0:0"}}
ROUNDS = 2


def child(model_name: str, tokenizer: Path) -> dict:
    """One setting's figures, in this process (the environment already set)."""
    import torch

    from bench.fp8_bench import FP8_SHAPES, NUM_DOCS, engine_run, plan_named
    from bench.gpu_bench import hf_model, latency_ms, ours_from_hf, shape_head, workloads
    from rose_embed.engine.rose.quantization.fp8_plan import quantize_model
    from rose_embed.engine.rose.attention.backends import make_attention_backend
    from rose_embed.engine.rose.layers.head import SentenceHead
    from rose_embed.engine.rose.runner import ModelRunner

    arch, shape = FP8_SHAPES[model_name]
    is_causal, pooling = shape_head(arch)
    hf, config = hf_model(arch, shape)
    model = ours_from_hf(arch, hf, config)
    del hf
    docs = workloads(None, None, num_queries=0)["docs"][:NUM_DOCS[model_name]]
    args = argparse.Namespace(max_batch_tokens=16384, max_batch_seqs=1024, repeats=3, tokenizer=tokenizer)
    bf16_rate, _ = engine_run(model, is_causal, pooling, docs, docs[:8], args)
    attention = make_attention_backend("auto", model.attention_shape(is_causal), torch.device("cuda"), torch.bfloat16)
    runner = ModelRunner(model, SentenceHead(pooling), attention, torch.device("cuda"), max_num_tokens=16384,
                         max_num_seqs=1024, max_seqlen=512)
    runner.choose_attention()
    p50, p99 = latency_ms(runner, 16)
    del runner
    quantize_model(model, plan_named("default+nearest"), pooling)
    fp8_rate, _ = engine_run(model, is_causal, pooling, docs, docs[:8], args)
    return {"bf16": bf16_rate, "fp8": fp8_rate, "p50": p50, "p99": p99}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="bert-base,qwen3-0.6b")
    parser.add_argument("--tokenizer", type=Path, default=None)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.tokenizer)))
        return
    results: dict[tuple[str, str], list[dict]] = {}
    for _ in range(ROUNDS):
        for model_name in args.models.split(","):
            for setting, env in SETTINGS.items():
                command = [sys.executable, __file__, "--child", model_name]
                if args.tokenizer:
                    command += ["--tokenizer", str(args.tokenizer)]
                done = subprocess.run(command, env={**os.environ, **env}, capture_output=True, text=True)
                if done.returncode != 0:
                    sys.exit(f"{model_name}, {setting}: the child exited {done.returncode}\n{done.stderr[-3000:]}")
                figures = json.loads(done.stdout.strip().splitlines()[-1])
                results.setdefault((model_name, setting), []).append(figures)
                print(model_name, setting, figures, flush=True)
    lines = ["# cuBLAS's workspace: the engine with and without it", "", *gpu_run_lines(),
             f"- each setting in a process of its own, alternating, {ROUNDS} rounds (medians); no workspace: "
             + ", ".join(f"{key}={value}" for key, value in SETTINGS["no workspace"].items()), "",
             "| model | setting | bf16 docs tok/s | FP8 docs tok/s | FP8 / bf16 | 16-token query p50 ms | p99 ms |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for model_name in args.models.split(","):
        for setting in SETTINGS:
            runs = results[(model_name, setting)]
            median = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
            lines.append(f"| {model_name} | {setting} | {median['bf16']:,.0f} | {median['fp8']:,.0f} | "
                         f"{median['fp8'] / median['bf16']:.4f} | {median['p50']:.3f} | {median['p99']:.3f} |")
    publish("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
