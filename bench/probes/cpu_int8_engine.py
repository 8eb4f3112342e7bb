"""`--quantization int8` against `--dtype bfloat16` on the CPU, the engine alone (Engine.embed in
this process, no HTTP): texts/s of each on the same texts, rounds in rotated order, and how long
int8's start takes (calibration, compiling the layers during warm-up). With --attention auto,sdpa
each precision runs twice, on the CPU attention the engine picks and on torch's SDPA, which
measures what the native attention kernel gives.

    python bench/probes/cpu_int8_engine.py --num-texts 1200 --rounds 7 --attention auto,sdpa --out bench/results/cpu/cpu-int8-engine.md

int8's speed bar is set through HTTP against sentence-transformers fp32 (bench/cpu_compare.py);
the engine alone says how much of it the model's side gives: the ratio int8 / bf16 here is the
most the server can gain from int8.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.lib.common import DEFAULT_DATA, build_texts, machine_description, publish  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="model directory or hub id (default: the embedded MiniLM)")
    parser.add_argument("--num-texts", type=int, default=1200, help="paragraphs of the shared workload")
    parser.add_argument("--join", type=int, default=1, help="paragraphs joined into one text")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--attention", default="auto",
                        help="comma-separated CPU attention backends each engine runs with (auto, native, sdpa): "
                             "'auto,sdpa' adds an engine of each precision on torch's SDPA beside the default")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from rose_embed.engine.contract.config import EngineConfig
    from rose_embed.engine.rose.engine import Engine

    texts = build_texts(DEFAULT_DATA, args.num_texts, args.join)
    settings = {}
    for attention in args.attention.split(","):
        suffix = "" if attention == "auto" else f" ({attention} attention)"
        settings["bf16" + suffix] = {"attention_backend": attention}
        settings["int8" + suffix] = {"attention_backend": attention, "quantization": "int8"}
    engines, start_seconds = {}, {}
    for name, extra in settings.items():
        started = time.perf_counter()
        engines[name] = Engine(EngineConfig(model=args.model, device="cpu", dtype="bfloat16",
                                            num_threads=args.threads, **extra))
        engines[name].warm_up()
        engines[name].embed(texts[:64])
        start_seconds[name] = time.perf_counter() - started
    rates = {name: [] for name in engines}
    names = list(engines)
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            started = time.perf_counter()
            engines[name].embed(texts)
            rates[name].append(len(texts) / (time.perf_counter() - started))
            print(f"round {r}: {name} {rates[name][-1]:.1f} texts/s", flush=True)
    publish(report(args, rates, start_seconds), args.out)


def report(args, rates: dict[str, list[float]], start_seconds: dict[str, float]) -> str:
    base = rates[next(iter(rates))]
    lines = ["# `--quantization int8` against `--dtype bfloat16`, the engine alone on the CPU", "",
             f"- command: `python bench/probes/cpu_int8_engine.py {' '.join(sys.argv[1:])}`",
             f"- machine: {machine_description()}; {args.threads} threads; "
             f"date {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
             f"- {args.num_texts} texts of {args.join} paragraph(s) from tests/data/stdlib_docstrings.jsonl, "
             f"{args.rounds} rounds in rotated order; texts/s: median of the rounds (best round); "
             "start: building the engine, warm-up (int8: calibration and compiling) and a first batch",
             "- x bf16: against the first row, the median of each round's ratio (the engines ran back to back in "
             "it), and the best rounds' ratio in brackets: on a shared machine a round's load moves both",
             "- attention: the engine's CPU default (the native kernel where it runs), or the one named",
             "", "| engine | texts/s | x bf16 | start |", "|---|---|---|---|"]
    for name, values in rates.items():
        per_round = statistics.median(v / b for v, b in zip(values, base))
        lines.append(f"| {name} | {statistics.median(values):.1f} ({max(values):.1f}) | "
                     f"{per_round:.2f}x ({max(values) / max(base):.2f}x) | {start_seconds[name]:.1f} s |")
    lines += ["", "Rounds (texts/s): " + "; ".join(
        f"{name} " + ", ".join(f"{v:.0f}" for v in values) for name, values in rates.items())]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
