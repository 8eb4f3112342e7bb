"""Several engines on one host: engine throughput with one engine and with N, in one run.

    python3 bench/dp_bench.py --device-count 2 --out bench/results/dp.md        # 2 GPUs
    python3 bench/dp_bench.py --device cpu --device-count 2 --model default \\
        --num-inputs 128 --max-batch-tokens 1024 --seconds 1 --rounds 1          # smoke run, no GPU

What runs is the server's path below HTTP: the batcher cuts the (tokenized beforehand)
inputs into full-budget batches in arrival order and feeds the engines, everything queued
at once so that every engine stays busy. This process plays the front end; the engine
processes are started as the supervisor starts them (server/engine_host.py: one per
device) and reached as a front end reaches them (server/engine_links.py). Three set-ups,
measured in turn each round:
  in process    one engine inside this process (an `Engine`, as `rose-embed embed` runs it): the baseline
  1 process     one engine process, batches and vectors through shared memory: the boundary's cost
  N processes   one engine process per device, one front end linked to them all, least-loaded
                dispatch: what `serve --devices cuda:0,...` runs
The 1-process and N-process set-ups are two front ends of the same engines (engine 0 serves
both; only one of them sends at a time). The ratio N processes / in process is the figure
to judge (target for 2 GPUs: >= 1.9). Batches in flight per engine are the server's
(server/topology.py: 2 on GPUs fed by one front end, 1 on CPUs), for every set-up.
The model is BERT-base's shape with random weights (bench/tiny_model.py) unless --model
says otherwise; bf16 on CUDA, every graph captured before timing (capture_at_start, as the server does).
The engines never talk to one another: no torch.distributed, no NCCL (and so no NVLink
multicast); NCCL_NVLS_ENABLE=0 is set all the same, for any library that might look.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import faulthandler
import math
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # inherited by the engine processes
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import DEFAULT_DATA, load_texts, machine_description, publish  # noqa: E402
from server.batcher import Batcher  # noqa: E402
from engine.config import EngineConfig  # noqa: E402
from engine.rose.engine import Engine  # noqa: E402
from server.engine_host import EngineHost  # noqa: E402
from server.engine_links import EngineLinks  # noqa: E402
from engine.model_files.loader import load_spec  # noqa: E402
from engine.shm_slots import SlotLayout  # noqa: E402
from server.topology import batches_in_flight, engine_config_for  # noqa: E402


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device-count", type=int, default=2, help="engines (GPUs cuda:0..N-1) to compare with one")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: N CPU engine processes")
    parser.add_argument("--model", default="bert-base",
                        help="bert-base (BERT-base's shape, random weights), default (the embedded MiniLM) or a path")
    parser.add_argument("--workloads", default="docs,stdlib",
                        help="comma-separated: docs (synthetic ids, lognormal lengths around 128 tokens, the "
                             "target's workload) and/or stdlib (the shared texts, tokenized: ~33 tokens each, "
                             "where the front end's cost per input shows; skipped if the file is missing)")
    parser.add_argument("--num-inputs", type=int, default=8192, help="inputs per pass")
    parser.add_argument("--seconds", type=float, default=3.0, help="about how long each timed run lasts")
    parser.add_argument("--rounds", type=int, default=3, help="timed runs of each set-up, alternating; median kept")
    parser.add_argument("--max-batch-tokens", type=int, default=16384)
    parser.add_argument("--max-batch-seqs", type=int, default=512)
    parser.add_argument("--time-limit", type=float, default=170.0, help="abort (with stacks) after this many seconds")
    parser.add_argument("--out", type=Path, default=None, help="also write the markdown report here")
    return parser.parse_args()


def check_devices(args: argparse.Namespace) -> tuple[str, ...]:
    if args.device_count < 2:
        sys.exit("dp_bench: --device-count must be at least 2 (it compares N engines with one)")
    if args.device == "cpu":
        return ("cpu",) * args.device_count
    seen = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if seen < args.device_count:
        sys.exit(f"dp_bench: --device-count {args.device_count} needs that many CUDA devices; torch sees {seen} "
                 "(use --device cpu for a smoke run)")
    return tuple(f"cuda:{i}" for i in range(args.device_count))


def model_path(name: str, scratch: Path) -> str | None:
    if name == "default":
        return None
    if name != "bert-base":
        return name
    from bench.tiny_model import write_tiny_bert

    return str(write_tiny_bert(scratch / "bert-base-random", hidden=768, layers=12))


def workloads(args: argparse.Namespace, engine: Engine) -> dict[str, list[np.ndarray]]:
    out = {}
    for name in args.workloads.split(","):
        if name == "docs":
            rng = np.random.default_rng(0)
            lengths = np.clip(rng.lognormal(np.log(128), 0.75, args.num_inputs), 8, engine.spec.max_seq_len)
            out[name] = [rng.integers(1000, 30000, n, dtype=np.int32) for n in lengths.astype(int)]
        elif name == "stdlib" and DEFAULT_DATA.is_file():
            out[name] = engine.tokenize(load_texts(args.num_inputs))
        elif name == "stdlib":
            print(f"# {DEFAULT_DATA} is missing: the stdlib workload is skipped", flush=True)
        else:
            sys.exit(f"dp_bench: unknown workload {name!r} (docs, stdlib)")
    return out


@dataclass
class Run:
    tokens_per_s: float
    cpu_share: float  # this process's CPU seconds per wall second while the batches ran
    vectors: np.ndarray  # the first copy's


async def run_pass(batcher: Batcher, seqs: list[np.ndarray], passes: int, timeout: float = 120.0) -> Run:
    """Queue `passes` copies of the workload at once and wait for the last batch.

    Timed from the first batch's start to the last one's vectors, so that queueing the
    inputs (which grows with the pass count) is not counted; the end is seen by a batch
    listener rather than by gathering every input's future, a cost of the benchmark only.
    """
    expected = passes * sum(len(s) for s in seqs)
    records, done = [], asyncio.Event()
    computed = [0]

    def on_batch(record) -> None:
        records.append(record)
        computed[0] += record.num_tokens
        if computed[0] >= expected:
            done.set()

    batcher.listeners.append(on_batch)
    try:
        futures = [f for _ in range(passes) for f in batcher.submit(seqs)]
        cpu = time.process_time()
        await asyncio.wait_for(done.wait(), timeout)
        cpu = time.process_time() - cpu
    finally:
        batcher.listeners.remove(on_batch)
    seconds = max(r.finished for r in records) - min(r.started for r in records)
    return Run(expected / seconds, cpu / seconds, np.stack([f.result() for f in futures[: len(seqs)]]))


def min_cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(((a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))).min())


async def measure(args, batchers: dict[str, Batcher], spread: EngineLinks, seqs: list[np.ndarray]) -> dict:
    """Every set-up once untimed (pass count, vectors), then `rounds` timed runs of each in turn."""
    runs: dict[str, list[Run]] = {name: [] for name in batchers}
    passes, vectors = {}, {}
    for name, batcher in batchers.items():
        warm = await run_pass(batcher, seqs, 1)
        vectors[name] = warm.vectors
        passes[name] = max(1, math.ceil(args.seconds * warm.tokens_per_s / sum(len(s) for s in seqs)))
        print(f"  warm pass {name:12s} {warm.tokens_per_s:>14,.0f} tok/s", flush=True)
    shares = [0] * len(spread.replicas)
    for round_index in range(args.rounds):
        for name, batcher in batchers.items():
            before = [r.num_tokens for r in spread.replicas]
            run = await run_pass(batcher, seqs, passes[name])
            runs[name].append(run)
            if name.endswith("processes"):  # how the last set-up's tokens spread over its engines
                shares = [s + r.num_tokens - b for s, r, b in zip(shares, spread.replicas, before)]
            print(f"  round {round_index + 1} {name:12s} {run.tokens_per_s:>14,.0f} tok/s, "
                  f"this process {100 * run.cpu_share:.0f}% of a core", flush=True)
    return {"rates": {k: statistics.median(r.tokens_per_s for r in v) for k, v in runs.items()}, "runs": runs,
            "cpu": {k: statistics.median(r.cpu_share for r in v) for k, v in runs.items()}, "shares": shares,
            "cosine": {k: min_cosine(v, vectors["in process"]) for k, v in vectors.items() if k != "in process"}}


def report(args, devices, model_name, loads: dict, results: dict, setup_seconds: float) -> str:
    n = len(devices)
    target = 0.95 * n  # 1.9x for 2
    names = [torch.cuda.get_device_name(i) for i in range(n)] if args.device == "cuda" else ["cpu"] * n
    lines = [
        f"# Data parallel on one host: {n} engines vs one ({datetime.datetime.now():%Y-%m-%d %H:%M})",
        "",
        f"- command: `python3 {' '.join(sys.argv)}`",
        f"- machine: {machine_description()}; devices: {', '.join(f'{d} ({g})' for d, g in zip(devices, names))}",
        f"- model: {model_name}; budget {args.max_batch_tokens} tokens / {args.max_batch_seqs} sequences per batch",
        "- the batcher's path (no HTTP, no tokenization), every input of a run queued at once; median of "
        f"{args.rounds} timed runs of ~{args.seconds:.0f} s per set-up, set-ups alternating; "
        f"set-up (loading, warm-up, graph capture) took {setup_seconds:.0f} s",
        "- no torch.distributed, no NCCL: the engines exchange nothing but shared memory and pipe messages "
        "with the front end",
        "- CPU: this (the front-end) process's CPU seconds per second while the batches ran, in % of one core "
        "(in process: the engine's own threads too)",
    ]
    for workload, result in results.items():
        seqs, rates = loads[workload], result["rates"]
        base, ratio = rates["in process"], rates[f"{n} processes"] / rates["in process"]
        lines += [
            "",
            f"## {workload}: {len(seqs)} inputs, {sum(len(s) for s in seqs):,} tokens per pass "
            f"({sum(len(s) for s in seqs) / len(seqs):.0f} per input)",
            "",
            "| set-up | engines | tokens/s | vs in process | CPU | runs (tokens/s) |",
            "| --- | --- | ---: | ---: | ---: | --- |",
        ]
        for name, rate in rates.items():
            engines = n if name.endswith("processes") else 1
            runs = ", ".join(f"{r.tokens_per_s:,.0f}" for r in result["runs"][name])
            lines.append(f"| {name} | {engines} | {rate:,.0f} | {rate / base:.2f}x | "
                         f"{100 * result['cpu'][name]:.0f}% | {runs} |")
        lines += [
            "",
            f"- {n} processes / in process: **{ratio:.2f}x** (target >= {target:.1f}x: "
            f"{'met' if ratio >= target else 'NOT met'})",
            f"- {n} processes / 1 process: {rates[f'{n} processes'] / rates['1 process']:.2f}x; "
            f"1 process / in process: {rates['1 process'] / base:.2f}x (the cost of the process boundary)",
            f"- tokens each engine computed in the {n}-process runs: "
            + ", ".join(f"engine {i}: {s:,}" for i, s in enumerate(result["shares"])),
            "- min cosine vs the in-process vectors: "
            + ", ".join(f"{k}: {v:.5f}" for k, v in result["cosine"].items()),
        ]
    return "\n".join(lines) + "\n"


async def main_async(args, devices) -> None:
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="dp-bench-") as scratch:
        model = model_path(args.model, Path(scratch))
        config = EngineConfig(model=model, device=devices[0], max_batch_tokens=args.max_batch_tokens,
                              max_batch_seqs=args.max_batch_seqs, capture_at_start=args.device == "cuda")
        spec = load_spec(config.model, config.max_seq_len, config.model_overrides, config.revision)
        in_flight = batches_in_flight(devices, 1)
        layout = SlotLayout(in_flight, config.max_batch_tokens, config.max_batch_seqs, spec.embedding_dim)
        n = len(devices)
        hosts: list[EngineHost] = []
        fronts: dict[str, EngineLinks] = {}
        batchers: dict[str, Batcher] = {}
        try:
            # The engine processes load while this one does: they are separate processes (and GPUs).
            print(f"# starting {n} engine processes on {', '.join(devices)} and one in process", flush=True)
            for index, device in enumerate(devices):
                hosts.append(EngineHost(index, engine_config_for(config, devices, device), layout))
            # Front end 0 reaches engine 0 alone; front end 1 every engine.
            fronts["1 process"] = EngineLinks(config, [hosts[0].connect(0)], [hosts[0].process])
            fronts[f"{n} processes"] = EngineLinks(config, [h.connect(1) for h in hosts], [h.process for h in hosts])
            starting = [asyncio.create_task(asyncio.to_thread(links.start)) for links in fronts.values()]
            local = await asyncio.to_thread(Engine, config)
            await asyncio.to_thread(local.warm_up)
            await asyncio.gather(*starting)
            for name, engine in {"in process": local, **fronts}.items():
                batchers[name] = Batcher(engine, config.max_batch_tokens, config.max_batch_seqs,
                                         max_batches_in_flight=in_flight)
                batchers[name].start()
            loads = workloads(args, local)
            model_name = {"bert-base": "BERT-base shape, random weights", "default": "all-MiniLM-L6-v2"}.get(
                args.model, args.model) + f", {local.dtype}".replace("torch.", "")
            setup_seconds = time.perf_counter() - started
            print(f"# set-up took {setup_seconds:.0f} s", flush=True)
            results = {}
            for name, seqs in loads.items():
                print(f"# {name}: {len(seqs)} inputs, {sum(len(s) for s in seqs):,} tokens per pass", flush=True)
                results[name] = await measure(args, batchers, fronts[f"{n} processes"], seqs)
        finally:
            for batcher in batchers.values():
                await batcher.stop()
            for links in fronts.values():  # as a front end stops: leave the rotation, tell the engines
                links.stop_serving()
                await asyncio.to_thread(links.shutdown)
            for host in hosts:
                await asyncio.to_thread(host.stop, 10.0)
    assert not (torch.distributed.is_available() and torch.distributed.is_initialized())
    publish(report(args, devices, model_name, loads, results, setup_seconds), args.out)


def main() -> None:
    args = parse_args()
    devices = check_devices(args)
    faulthandler.dump_traceback_later(args.time_limit, exit=True)  # never outlive the lead's slot
    asyncio.run(main_async(args, devices))


if __name__ == "__main__":
    main()
