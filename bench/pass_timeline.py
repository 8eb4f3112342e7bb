"""Where a pass's time goes, batch by batch: the device's work, its idle time, and the host's.

    python3 bench/pass_timeline.py [--models minilm] [--queries 32768,4096] [--out FILE]

For each model shape (random bf16 weights) and workload (gpu_bench's docs, and its queries at
each count given), a ModelRunner with the default attention backend (auto) runs passes as
gpu_bench times them (run_ours: batch N+1 launched before batch N is read back), then:
  - without the profiler: the median wall time of a pass, and the host's time per batch in
    pack, in execute (filling the static buffer, launching the graph and the readback) and
    blocked in wait (the device still busy: the larger, the more the device is the bound);
  - one pass under torch.profiler: the device's busy time (the union of its kernels and
    copies), its idle time, the largest idle gaps by the work around them, and per batch
    the kernels' and the copies' time;
  - the kernels grouped by name, time per batch, each workload side by side;
  - a pass's median wall time three ways: vectors dropped as they land (the split above),
    landed in one buffer reused from pass to pass (gpu_bench's run_ours), and kept per
    batch then concatenated into a fresh array (what gpu_bench timed until it
    landed them in one buffer).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.gpu_bench import MAX_SEQLEN, cuda_time, ours_model, run_ours, workloads  # noqa: E402
from engine.rose.batch import cut_batches, pack  # noqa: E402
from engine.config import EngineConfig  # noqa: E402
from engine.rose.layers.attention import make_attention_backend  # noqa: E402
from engine.rose.layers.head import SentenceHead  # noqa: E402
from engine.rose.runner import ModelRunner  # noqa: E402


def host_split_pass(runner: ModelRunner, seqs: list[np.ndarray], max_tokens: int, max_seqs: int) -> dict[str, float]:
    """run_ours with the host's time split: seconds in pack, execute and wait, and the wall."""
    spent = {"pack": 0.0, "execute": 0.0, "wait": 0.0}
    torch.cuda.synchronize()
    started = time.perf_counter()
    pending = None
    for lo, hi in cut_batches([len(s) for s in seqs], max_tokens, max_seqs):
        t0 = time.perf_counter()
        batch = pack(seqs[lo:hi])
        t1 = time.perf_counter()
        result = runner.execute(batch)
        t2 = time.perf_counter()
        if pending is not None:
            pending.wait()
        spent["pack"] += t1 - t0
        spent["execute"] += t2 - t1
        spent["wait"] += time.perf_counter() - t2
        pending = result
    t3 = time.perf_counter()
    pending.wait()
    spent["wait"] += time.perf_counter() - t3
    spent["wall"] = time.perf_counter() - started
    return spent


def concatenated_pass(runner: ModelRunner, seqs: list[np.ndarray], max_tokens: int, max_seqs: int) -> np.ndarray:
    """The engine's loop with each batch's vectors kept, then concatenated into a fresh array."""
    out, pending = [], None
    for lo, hi in cut_batches([len(s) for s in seqs], max_tokens, max_seqs):
        result = runner.execute(pack(seqs[lo:hi]))
        if pending is not None:
            out.append(pending.wait())
        pending = result
    out.append(pending.wait())
    return np.concatenate(out)


def device_intervals(prof) -> list[tuple[float, float, str]]:
    """(start us, end us, name) of every kernel, copy and memset the profiler saw, by start."""
    events = [(e.time_range.start, e.time_range.end, e.name) for e in prof.events()
              if e.device_type == torch.autograd.DeviceType.CUDA]
    return sorted(events)


def timeline_summary(intervals: list[tuple[float, float, str]], num_batches: int) -> dict:
    """Busy and idle microseconds over the span of `intervals`, the largest idle gaps with
    the work before and after each, and per batch the kernel and copy time."""
    busy, gaps = 0.0, []
    span_start, frontier, last_name = intervals[0][0], intervals[0][0], intervals[0][2]
    for start, end, name in intervals:
        if start > frontier:
            gaps.append((start - frontier, last_name, name))
        if end > frontier:
            busy += end - max(start, frontier)
            frontier, last_name = end, name
    copies = {"HtoD": 0.0, "DtoH": 0.0}
    kernels = 0.0
    for start, end, name in intervals:
        kind = next((k for k in copies if k in name), None) if name.startswith("Memcpy") else None
        if kind:
            copies[kind] += end - start
        elif not name.startswith("Memset"):
            kernels += end - start
    gaps.sort(reverse=True)
    return dict(span=frontier - span_start, busy=busy, idle=sum(g[0] for g in gaps), gaps=gaps,
                kernels_per_batch=kernels / num_batches, htod_per_batch=copies["HtoD"] / num_batches,
                dtoh_per_batch=copies["DtoH"] / num_batches)


def kernel_times(intervals: list[tuple[float, float, str]], num_batches: int) -> dict[str, float]:
    """Microseconds per batch of each kernel name (copies included)."""
    totals: dict[str, float] = {}
    for start, end, name in intervals:
        totals[name[:80]] = totals.get(name[:80], 0.0) + (end - start) / num_batches
    return totals


def profile_model(name: str, loads: dict[str, list[np.ndarray]], args, out: list[str]) -> None:
    from torch.profiler import ProfilerActivity, profile

    ours, is_causal, pooling = ours_model(name)
    attention = make_attention_backend("auto", ours.attention_shape(is_causal), torch.device("cuda"), torch.bfloat16)
    runner = ModelRunner(ours, SentenceHead(pooling), attention, torch.device("cuda"),
                         max_num_tokens=args.max_batch_tokens, max_num_seqs=args.max_batch_seqs,
                         max_seqlen=MAX_SEQLEN)
    runner.choose_attention()
    out.append(f"\n## {name}\n")
    out.append("| workload | batches | tokens/batch | seqs/batch | wall ms/pass | tok/s | host pack us/batch | "
               "host execute us/batch | host blocked in wait us/batch | device busy ms (profiled pass) | "
               "device idle ms | kernels us/batch | HtoD us/batch | DtoH us/batch |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    landing_rows = ["\nA pass's median wall time, by where its vectors land:\n",
                    "| workload | dropped ms | one reused buffer ms | concatenated into a fresh array ms |",
                    "|---|---:|---:|---:|"]
    per_kernel, gap_lines = {}, []
    caps = (args.max_batch_tokens, args.max_batch_seqs)
    for workload, seqs in loads.items():
        num_tokens = sum(len(s) for s in seqs)
        num_batches = len(cut_batches([len(s) for s in seqs], *caps))
        for _ in range(3):  # eager, capture, replay of every key
            host_split_pass(runner, seqs, *caps)
        splits = []
        while len(splits) < args.passes or sum(s["wall"] for s in splits) < args.min_seconds:
            splits.append(host_split_pass(runner, seqs, *caps))
        middle = sorted(splits, key=lambda s: s["wall"])[len(splits) // 2]
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            host_split_pass(runner, seqs, *caps)
        intervals = device_intervals(prof)
        summary = timeline_summary(intervals, num_batches)
        per_kernel[workload] = kernel_times(intervals, num_batches)
        wall = statistics.median(s["wall"] for s in splits)
        landing = run_ours(runner, seqs, *caps)
        reused = cuda_time(functools.partial(run_ours, runner, seqs, *caps, landing), args.passes, args.min_seconds)
        fresh = cuda_time(functools.partial(concatenated_pass, runner, seqs, *caps), args.passes, args.min_seconds)
        landing_rows.append(f"| {workload} | {1e3 * wall:.2f} | {1e3 * reused:.2f} | {1e3 * fresh:.2f} |")
        out.append(
            f"| {workload} | {num_batches} | {num_tokens / num_batches:,.0f} | {len(seqs) / num_batches:,.0f} | "
            f"{1e3 * wall:.2f} | {num_tokens / wall:,.0f} | {1e6 * middle['pack'] / num_batches:,.0f} | "
            f"{1e6 * middle['execute'] / num_batches:,.0f} | {1e6 * middle['wait'] / num_batches:,.0f} | "
            f"{summary['busy'] / 1e3:.2f} | {summary['idle'] / 1e3:.2f} | {summary['kernels_per_batch']:,.0f} | "
            f"{summary['htod_per_batch']:,.1f} | {summary['dtoh_per_batch']:,.1f} |")
        print(out[-1], flush=True)
        gap_lines.append(f"- {workload}: idle {summary['idle']:,.0f} us in {len(summary['gaps'])} gaps; largest: "
                         + "; ".join(f"{us:,.0f} us after `{before[:40]}` before `{after[:40]}`"
                                     for us, before, after in summary["gaps"][:4]))
    out.extend(landing_rows)
    out.append("\nThe device's idle gaps in the profiled pass:\n")
    out.extend(gap_lines)
    names = sorted({k for times in per_kernel.values() for k in times},
                   key=lambda k: -max(times.get(k, 0.0) for times in per_kernel.values()))
    out.append("\nKernels and copies, us per batch (profiled pass):\n")
    out.append("| kernel | " + " | ".join(per_kernel) + " |")
    out.append("|---|" + "---:|" * len(per_kernel))
    for kernel in names[: args.top]:
        out.append(f"| `{kernel}` | " + " | ".join(f"{times.get(kernel, 0.0):,.1f}" for times in per_kernel.values()) + " |")
    out.append("| all | " + " | ".join(f"{sum(times.values()):,.1f}" for times in per_kernel.values()) + " |")
    del runner, attention, ours
    torch.cuda.empty_cache()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="minilm")
    parser.add_argument("--queries", default="32768,4096", help="query counts, one workload each")
    parser.add_argument("--max-batch-tokens", type=int, default=EngineConfig.max_batch_tokens)
    parser.add_argument("--max-batch-seqs", type=int, default=EngineConfig.max_batch_seqs)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--min-seconds", type=float, default=1.0)
    parser.add_argument("--top", type=int, default=16)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    loads = {"docs": workloads(None, None, 0)["docs"]}
    for count in (int(c) for c in args.queries.split(",") if c):
        loads[f"queries {count}"] = workloads(None, None, count)["queries"]
    out = [f"# A pass, batch by batch: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
           f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
           f"command: `python3 bench/pass_timeline.py {' '.join(sys.argv[1:])}`"]
    for name in args.models.split(","):
        profile_model(name, loads, args, out)
        if args.out:  # after each model: a call cut short keeps the models done
            args.out.write_text("\n".join(out) + "\n")
    print("\n".join(out), flush=True)


if __name__ == "__main__":
    main()
