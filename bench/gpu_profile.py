"""Where a batch's GPU time goes: kernel-by-kernel profile of one packed batch per model,
with the fused Triton kernels on and off (and, for the BERT family, the GELU in the up
projection's epilogue), next to the dense ceiling.

    python3 bench/gpu_profile.py [--models minilm,bert-base,qwen3-0.6b] [--tokens 16384] [--workload docs|queries] [--out FILE]

--models takes fp8_bench's shapes, the Qwen3-Embedding-4B shape (qwen3-4b) among them.

For each model shape (random bf16 weights) and each setting of the fused kernels:
  - the first batch of gpu_bench's docs (or queries) workload, cut at --tokens tokens, is run
    eagerly under torch.profiler; the table lists its kernels grouped by name, with time per
    batch and launches per batch, and the sum of all kernel time;
  - the same batch replayed as a whole-model CUDA graph (ms per batch, tokens/s, fraction of
    the dense ceiling: the model's linear layers alone on 8192 tokens), and the graph alone
    on the device (CUDA events around its replay: kernels and the gaps between them), with
    the largest gaps by the pair of kernels around them;
  - a 16-token query: graph-replay latency p50 and its kernel count;
  - agreement of each setting's vectors with the unfused ones (min cosine).

Results in bench/results/ (`bench/gpu_session.sh profile` runs the second):
  gpu-profile.md                python3 bench/gpu_profile.py --models qwen3-0.6b,bert-base,minilm
  gpu-profile-packed.md         python3 bench/gpu_profile.py --backend packed
  gpu-profile-device-time.md    python3 bench/gpu_profile.py --backend packed --models bert-base,qwen3-0.6b,minilm
  gpu-profile-in-graph.md       python3 bench/gpu_profile.py --backend packed --models bert-base,qwen3-0.6b
  gpu-profile-filled.md         python3 bench/gpu_profile.py --backend packed --models bert-base,qwen3-0.6b --fill
  gpu-profile-fp8.md            python3 bench/gpu_profile.py --backend packed --models qwen3-0.6b,bert-base --fp8-plan every
  gpu-profile-fp8-qwen3-4b-h100.md  python3 bench/gpu_profile.py --backend packed --models qwen3-4b --fill --fp8-plan default --top 20
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib.common import cuda_event_ms  # noqa: E402
from bench.fp8_bench import FP8_SHAPES  # noqa: E402
from bench.gpu_bench import dense_ceiling, latency_ms, ours_model  # noqa: E402
from rose_embed.engine.rose.cublas_workspace import give_cublas_no_workspace  # noqa: E402
from rose_embed.engine.contract.batch import pack  # noqa: E402
from rose_embed.engine.contract.batch import cut_batches  # noqa: E402
from rose_embed.engine.rose.layers import fused  # noqa: E402
from rose_embed.engine.rose.attention.backends import make_attention_backend  # noqa: E402
from rose_embed.engine.rose.layers.head import SentenceHead  # noqa: E402
from rose_embed.engine.rose.runner import ModelRunner  # noqa: E402


def first_batch(workload: str, num_tokens: int, max_seqs: int) -> list[np.ndarray]:
    """The first batch the batcher would cut from gpu_bench's docs or queries workload."""
    rng = np.random.default_rng(0)
    if workload == "docs":
        lengths = np.clip(rng.lognormal(np.log(128), 0.75, 4096), 8, 512).astype(int)
    else:
        lengths = rng.integers(8, 33, 4096)
    seqs = [rng.integers(1000, 30000, n, dtype=np.int32) for n in lengths]
    lo, hi = cut_batches([len(s) for s in seqs], num_tokens, max_seqs)[0]
    return seqs[lo:hi]


def kernel_table(runner: ModelRunner, seqs: list[np.ndarray], runs: int = 3) -> tuple[list[tuple], float, int]:
    """[(name, µs per batch, launches per batch)], total kernel µs per batch, launches per batch."""
    from torch.profiler import ProfilerActivity, profile

    batch = pack(seqs)
    runner.execute(batch).wait()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(runs):
            runner.execute(batch).wait()
    return _grouped(prof, runs)


def graph_kernel_table(runner: ModelRunner, runs: int = 3) -> tuple[list[tuple], float, int, list[tuple]] | None:
    """kernel_table's rows for the runner's one captured graph, replayed alone (None unless one
    graph), and the gaps between its kernels (`_gaps`)."""
    from torch.profiler import ProfilerActivity, profile

    graph = _only_graph(runner)
    if graph is None:
        return None
    graph.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(runs):
            graph.replay()
        torch.cuda.synchronize()
    return (*_grouped(prof, runs), _gaps(prof, runs))


def _gaps(prof, runs: int) -> list[tuple[str, str, float, float]]:
    """The idle time between consecutive kernels of the replays, summed per (kernel before,
    kernel after) pair: [(before, after, us per batch, times per batch)], largest first. The
    gap before each replay's first kernel (the host's launch of the next replay) is left out."""
    events = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                    key=lambda e: e.time_range.start)
    per_replay = max(1, len(events) // runs)
    pairs: dict[tuple[str, str], list[float]] = {}
    for i in range(1, len(events)):
        if i % per_replay == 0:
            continue
        before, after = events[i - 1], events[i]
        slot = pairs.setdefault((before.name[:60], after.name[:60]), [0.0, 0])
        slot[0] += max(0.0, after.time_range.start - before.time_range.end)
        slot[1] += 1
    return sorted(((b, a, us / runs, n / runs) for (b, a), (us, n) in pairs.items()), key=lambda r: -r[2])


def _grouped(prof, runs: int) -> tuple[list[tuple], float, int]:
    totals: dict[str, list[float]] = {}
    for event in prof.events():
        if event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        name = event.name
        slot = totals.setdefault(name[:90], [0.0, 0])
        slot[0] += event.device_time_total if hasattr(event, "device_time_total") else event.cuda_time_total
        slot[1] += 1
    rows = sorted(((n, t / runs, c / runs) for n, (t, c) in totals.items()), key=lambda r: -r[1])
    return rows, sum(r[1] for r in rows), int(sum(r[2] for r in rows))


def replay_ms(runner: ModelRunner, seqs: list[np.ndarray], iters: int = 20) -> float:
    batch = pack(seqs)
    for _ in range(3):  # eager, capture, replay
        runner.execute(batch).wait()
    times = []
    for _ in range(iters):
        torch.cuda.synchronize()
        start = time.perf_counter()
        runner.execute(pack(seqs)).wait()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def graph_device_ms(runner: ModelRunner, iters: int = 20) -> float | None:
    """The runner's one captured graph replayed alone, timed by CUDA events: its kernels and the
    gaps between them inside the graph, without the host's packing, copies and readback (which
    overlap the device's work when batches are in flight). None unless exactly one graph."""
    graph = _only_graph(runner)
    return None if graph is None else cuda_event_ms(graph.replay, iters, warmups=0)


def _only_graph(runner: ModelRunner) -> torch.cuda.CUDAGraph | None:
    """The runner's captured graph where it has exactly one (the profiled batch's), else None."""
    captured = list(runner.graphs.graphs.values()) if runner.graphs is not None else []
    return captured[0].graph if len(captured) == 1 else None


def profile_model(name: str, args, out: list[str]) -> None:
    ours, is_causal, pooling = ours_model(name, FP8_SHAPES)
    ceiling = dense_ceiling(ours, 3)
    fp8_line = ""
    if args.fp8_plan is not None:
        from bench.fp8_bench import plan_named
        from rose_embed.engine.rose.quantization.fp8_plan import quantize_model

        fp8_line = f"; FP8 plan {args.fp8_plan}: " + quantize_model(ours, plan_named(args.fp8_plan), pooling)
    seqs = first_batch(args.workload, args.tokens, args.max_batch_seqs)
    if args.fill:  # sequences of filler tokens up to the bucket: the eager run's matmuls take the graph's sizes
        missing = args.tokens - sum(len(s) for s in seqs)
        seqs += [np.full(min(512, missing - lo), 1000, np.int32) for lo in range(0, missing, 512)]
    num_tokens = sum(len(s) for s in seqs)
    out.append(f"\n## {name}: {len(seqs)} {args.workload}, {num_tokens} tokens; dense ceiling {ceiling:,.0f} tok/s "
               f"({1e3 * num_tokens / ceiling:.2f} ms for this batch's tokens){fp8_line}\n")
    vectors = {}
    default_epilogue = fused.gelu_epilogue_enabled()
    settings = [("unfused", False, False), ("fused", True, False)]
    if FP8_SHAPES[name][0] == "bert":  # an up projection with a GELU of its own (fused.linear_gelu)
        settings.append(("fused, GELU in the matmul's epilogue", True, True))
    if args.fp8_plan is not None:  # the FP8 kernels are the fused ones
        settings = [("FP8, fused", True, default_epilogue)]
    for label, use_fused, gelu_epilogue in settings:
        fused.set_fused_kernels(use_fused)
        fused.set_gelu_epilogue(gelu_epilogue)
        attention = make_attention_backend(args.backend, ours.attention_shape(is_causal), torch.device("cuda"),
                                           torch.bfloat16)
        common = dict(max_num_tokens=args.tokens, max_num_seqs=args.max_batch_seqs, max_seqlen=512)
        eager = ModelRunner(ours, SentenceHead(pooling), attention, torch.device("cuda"), enforce_eager=True, **common)
        t0 = time.perf_counter()
        vectors[label] = eager.execute(pack(seqs)).wait()
        first_s = time.perf_counter() - t0
        rows, total_us, launches = kernel_table(eager, seqs)
        graphs = ModelRunner(ours, SentenceHead(pooling), attention, torch.device("cuda"), **common)
        ms = replay_ms(graphs, seqs)
        device_ms = graph_device_ms(graphs)
        in_graph = graph_kernel_table(graphs)
        p50, p99 = latency_ms(graphs, 16, iters=200)
        _, query_us, query_launches = kernel_table(eager, [np.arange(1000, 1016, dtype=np.int32)])
        out.append(f"### {label}: graph replay {ms:.2f} ms/batch = {num_tokens / ms:,.0f}k tok/s = "
                   f"{num_tokens / ms * 1e3 / ceiling:.2f} of ceiling; kernel sum {total_us / 1e3:.2f} ms, "
                   f"{launches} launches/batch; 16-token query p50 {p50:.3f} ms p99 {p99:.3f} ms "
                   f"({query_launches} launches, kernel sum {query_us:.0f} us); first eager run {first_s:.1f} s\n")
        if device_ms is not None:
            out.append(f"the graph alone on the device (CUDA events around its replay): {device_ms:.2f} ms, "
                       f"{device_ms - total_us / 1e3:.2f} ms more than its kernels' sum (the gaps inside the "
                       f"graph); the host's part of the replay above: {ms - device_ms:.2f} ms\n")
        if in_graph is not None and in_graph[2]:
            graph_us = {kernel: us for kernel, us, _ in in_graph[0]}
            eager_us = {kernel: us for kernel, us, _ in rows}
            out.append(f"the same kernels inside the graph (profiled replays): sum {in_graph[1] / 1e3:.2f} ms, "
                       f"{in_graph[2]} launches/batch; where they differ most from eager:\n")
            out.append("| kernel | eager us/batch | in the graph us/batch |\n|---|---:|---:|")
            names = sorted(set(graph_us) | set(eager_us),
                           key=lambda k: -abs(graph_us.get(k, 0.0) - eager_us.get(k, 0.0)))
            for kernel in names[:8]:
                out.append(f"| `{kernel}` | {eager_us.get(kernel, 0.0):,.0f} | {graph_us.get(kernel, 0.0):,.0f} |")
            out.append("")
            gaps = in_graph[3]
            out.append(f"the gaps between the graph's kernels (profiled replays): {sum(g[2] for g in gaps):,.0f} "
                       "us per batch; the largest, by the pair of kernels around them:\n")
            out.append("| kernel before | kernel after | us per batch | times per batch |\n|---|---|---:|---:|")
            for before, after, us, count in gaps[:8]:
                out.append(f"| `{before}` | `{after}` | {us:,.1f} | {count:g} |")
            out.append("")
        elif in_graph is not None:
            out.append("the profiler recorded no kernels inside the graph's replays\n")
        out.append("| kernel | us/batch | % | launches/batch |\n|---|---:|---:|---:|")
        for kernel, us, count in rows[: args.top]:
            out.append(f"| `{kernel}` | {us:,.0f} | {100 * us / total_us:.1f} | {count:g} |")
        out.append("")
        print("\n".join(out[-args.top - 4:]), flush=True)
        del eager, graphs, attention
        torch.cuda.empty_cache()
    reference = vectors.get("unfused")
    for label, got in vectors.items():
        if reference is not None and label != "unfused":
            cos = (got * reference).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(reference, axis=1))
            out.append(f"{label} vs unfused vectors: min cosine {cos.min():.6f} over {len(cos)} {args.workload}\n")
            print(out[-1], flush=True)
    fused.set_fused_kernels(True)
    fused.set_gelu_epilogue(default_epilogue)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="minilm,bert-base,qwen3-0.6b")
    parser.add_argument("--backend", default="varlen")
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--workload", choices=["docs", "queries"], default="docs")
    parser.add_argument("--max-batch-seqs", type=int, default=1024)
    parser.add_argument("--top", type=int, default=14)
    parser.add_argument("--fill", action="store_true",
                        help="fill the batch up to --tokens, so that the eager run computes the graph's sizes")
    parser.add_argument("--fp8-plan", default=None,
                        help="profile the model with this FP8 plan of bench/fp8_bench.py (default, every, first3-last0, "
                             "first3-last0+pooled, ...) instead of bf16: fused kernels only")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    give_cublas_no_workspace()  # as the server's engine processes run
    if args.fp8_plan is not None:
        from bench.fp8_bench import plan_named

        if plan_named(args.fp8_plan) is None:
            parser.error(f"unknown FP8 plan {args.fp8_plan!r}")
    out = [f"# GPU profile: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
           f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
           f"command: `python3 bench/gpu_profile.py {' '.join(sys.argv[1:])}`"]
    for name in args.models.split(","):
        profile_model(name, args, out)
        if args.out:  # after each model: a call cut short keeps the models done
            args.out.write_text("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
