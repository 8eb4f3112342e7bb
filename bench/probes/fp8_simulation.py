"""FP8's quality on a real checkpoint without a GPU: the default model (all-MiniLM-L6-v2) with the
scheme simulated exactly on the CPU (engine/rose/quantization/fp8.py: weights and activations
round-tripped through e4m3 with the GPU path's scales, products in float32), under each FP8 plan,
against its float32 self on the shared workload's paragraphs. The GPU path agrees with this
simulation within bf16's rounding (tests/gpu/test_fp8_gpu.py); fast accumulation is the GPU's alone.

    python bench/probes/fp8_simulation.py --out bench/results/fp8/fp8-simulation-cpu.md

With --model (a saved model: bench/tiny_model.py writes the benchmark shapes with random weights)
and --first-layers, it measures how far the vectors move as more of the first layers stay bf16
(the engine's rules, width floor lifted, bf16 in the first N layers for each N given):

    python bench/tiny_model.py /tmp/qwen3-random --arch qwen3-0.6b
    python bench/probes/fp8_simulation.py --model /tmp/qwen3-random --first-layers 0,2,4,6,8 --num-texts 600

An N may carry fp8_bench.py's plan suffixes: N+pooled also keeps the pooled tokens' rows of
every FP8 linear bf16 (Fp8Plan.bf16_pooled_tokens; models that pool one token), N+o_proj that kind
of linear bf16 in every layer, N+rows-up the BERT family's up projections at scales per row:

    python bench/probes/fp8_simulation.py --model /tmp/qwen3-random --first-layers 0,0+pooled,2,2+pooled,2+o_proj
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.lib.common import load_texts  # noqa: E402
from bench.fp8_bench import plan_named  # noqa: E402
from rose_embed.engine.contract.config import EngineConfig, Fp8Plan  # noqa: E402

# the first and the last layer bf16; the pooled tokens' rows bf16 only where a label says so, whatever the width
_EDGES = replace(Fp8Plan(), min_hidden_size=0, bf16_first_layers=1, bf16_last_layers=1, bf16_pooled_tokens=False)
_EVERY = Fp8Plan(min_hidden_size=0, bf16_first_layers=0, bf16_last_layers=0, attention_output_min_hidden_size=0,
                 bf16_pooled_tokens=False)
PLANS = {  # label -> plan (MiniLM is narrower than FP8 pays for: every plan here lifts that floor)
    "every linear": _EVERY,
    "every linear but o_proj": replace(_EVERY, attention_output_min_hidden_size=1 << 30),
    "edge layers bf16": _EDGES,
    "edge layers bf16, o_proj FP8": replace(_EDGES, attention_output_min_hidden_size=0),
    "two edge layers each end bf16": replace(_EDGES, bf16_first_layers=2, bf16_last_layers=2),
    "first layer bf16, last FP8 (the engine's rules at this width)": replace(Fp8Plan(), min_hidden_size=0),
    "first two layers bf16, last FP8": replace(Fp8Plan(), min_hidden_size=0, bf16_first_layers=2),
    "first three layers bf16, last FP8": replace(Fp8Plan(), min_hidden_size=0, bf16_first_layers=3),
    "first three layers bf16, last bf16": replace(_EDGES, bf16_first_layers=3),
}


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-texts", type=int, default=2000)
    parser.add_argument("--model", default=None, help="a saved model (default: the embedded all-MiniLM-L6-v2)")
    parser.add_argument("--max-batch-tokens", type=int, default=EngineConfig.max_batch_tokens,
                        help="smaller batches hold smaller activations (the 4B shape: 2048)")
    parser.add_argument("--first-layers", default=None,
                        help="comma-separated N or N+pooled: plans with bf16 in the first N layers (and in the "
                             "pooled tokens' rows) instead of the plans above")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    from rose_embed.engine.rose.engine import Engine
    from rose_embed.engine.rose.quantization.fp8_plan import fp8_linear_names, quantize_model
    from rose_embed.engine.rose.quantization.module_swap import replace_submodule

    texts = load_texts(args.num_texts)
    engine = Engine(EngineConfig(model=args.model, device="cpu", dtype="float32", max_batch_tokens=args.max_batch_tokens))
    plans = PLANS
    if args.first_layers is not None:
        plans = {}
        for entry in args.first_layers.split(","):
            n, *extras = entry.split("+")
            plan = plan_named(f"first{n}-last0" + "".join(f"+{extra}" for extra in extras))
            if plan is None:
                parser.error(f"--first-layers: {entry!r} is not N followed by fp8_bench.py's plan suffixes "
                             "(+pooled, +nearest, +rows-up, +KIND, +edge-KIND, +attention-firstK)")
            labels = {"pooled": ", pooled tokens' rows bf16", "nearest": ", weights rounded to nearest",
                      "rows-up": ", up projections at scales per row"}
            label = f"first {n} layers bf16" + "".join(labels.get(extra, f", {extra} bf16") for extra in extras)
            plans[label] = plan
    reference = engine.embed(texts)
    float32_model = engine.runner.model
    lines = ["| plan | FP8 linears | min cosine | 1st percentile | mean |", "|---|---|---|---|---|"]
    for label, plan in plans.items():
        # The plan's linears swapped in place and back, not a copy of the model: the 4B shape in
        # float32 fills most of a 24 GiB host on its own.
        originals = {name: float32_model.get_submodule(name) for name in fp8_linear_names(float32_model, plan)}
        line = quantize_model(float32_model, plan, engine.runner.head.pooling, engine.embed)
        try:
            cos = cosines(engine.embed(texts), reference)
        finally:
            for name, linear in originals.items():
                replace_submodule(float32_model, name, linear)
            float32_model.fp8_pooled_tokens = None
        lines.append(f"| {label} | {line.split(' linear layers')[0].removeprefix('FP8: ')} | {cos.min():.5f} | "
                     f"{np.percentile(cos, 1):.5f} | {cos.mean():.5f} |")
        print(lines[-1], flush=True)
    report = "\n".join([
        f"# FP8 simulated on the CPU: {args.model or 'all-MiniLM-L6-v2'} against its float32 self", "",
        *([f"- model: {args.model} ({type(float32_model).__name__}, {len(float32_model.layers)} layers)"]
          if args.model else []),
        f"- command: `python bench/probes/fp8_simulation.py {' '.join(sys.argv[1:])}`",
        f"- machine: {platform.machine()}, {platform.system()}; date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- the first {args.num_texts:,} paragraphs of tests/data/stdlib_docstrings.jsonl; cosine per text between the "
        "simulated FP8 model's vector and the float32 model's", "", *lines, ""])
    print(report)
    if args.out:
        args.out.write_text(report)


if __name__ == "__main__":
    main()
