"""The mixed soak's report: the verdict, each process's memory (baseline, peak, final, idle), its
level minute by minute, and the requests by kind. Measures nothing; bench/soak.py writes it."""

from __future__ import annotations

import statistics
import sys
import time

from bench.lib.process_memory import MemoryWatch, Verdict
from bench.lib.soak_mixed import Tally

MIB = 2**20


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value / MIB:,.0f}"


def _parts(parts: dict[str, int]) -> str:
    return " / ".join(_mib(parts.get(name)) for name in ("anon", "shmem", "file"))


def memory_table(verdicts: list[Verdict]) -> list[str]:
    lines = ["| process | pid | start MiB | baseline MiB | peak MiB (at) | peak over baseline | final MiB | idle MiB "
             "| anon / shmem / file MiB at baseline | at peak | held |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|"]
    for v in verdicts:
        lines.append(f"| {v.role} | {v.pid} | {_mib(v.start)} | {_mib(v.baseline)} | {_mib(v.peak)} ({v.peak_at:.0f} s) "
                     f"| {v.growth:+.1%} | {_mib(v.final)} | {_mib(v.idle)} | {_parts(v.parts_at_baseline)} "
                     f"| {_parts(v.parts_at_peak)} | {'yes' if v.passed else '**no**'} |")
    return lines


def minute_table(watch: MemoryWatch, load_end: float) -> list[str]:
    """Each process's highest resident set in each minute of the load."""
    minutes = int(load_end // 60) + (load_end % 60 > 1)
    tracks = list(watch.tracks.values())
    lines = ["| minute | " + " | ".join(t.role for t in tracks) + " |", "|---:|" + "---:|" * len(tracks)]
    for minute in range(minutes):
        levels = [_mib(t.level(60 * minute, min(60 * (minute + 1), load_end))) for t in tracks]
        lines.append(f"| {minute + 1} | " + " | ".join(levels) + " |")
    return lines


def request_table(tally: Tally, seconds: float) -> list[str]:
    lines = ["| kind | sent | as expected | inputs answered | statuses | 429s retried | median s | max s |",
             "|---|---:|---:|---:|---|---:|---:|---:|"]
    for name, k in sorted(tally.kinds.items(), key=lambda item: -item[1].sent):
        statuses = ", ".join(f"{status}: {count}" for status, count in sorted(k.statuses.items()))
        if k.transport_errors:
            statuses += f", connection errors: {k.transport_errors}"
        median = f"{statistics.median(k.seconds):.2f}" if k.seconds else "-"
        longest = f"{max(k.seconds):.2f}" if k.seconds else "-"
        lines.append(f"| {name} | {k.sent:,} | {k.passed:,} | {k.inputs:,} | {statuses} | {k.retried_429:,} "
                     f"| {median} | {longest} |")
    sent = sum(k.sent for k in tally.kinds.values())
    inputs = sum(k.inputs for k in tally.kinds.values())
    lines.append(f"| all | {sent:,} | {sent - tally.failed:,} | {inputs:,} ({inputs / seconds:,.0f}/s) | | "
                 f"{sum(k.retried_429 for k in tally.kinds.values()):,} | | |")
    return lines


def render(args, server_args: list[str], machine: str, code: str, watch: MemoryWatch, verdicts: list[Verdict],
           tally: Tally, load_end: float, restarted: list[int], passed: bool) -> str:
    flags = " ".join(f"`{a}`" if a.startswith("--") else a for a in server_args)
    lines = [
        "# Mixed soak: each process's resident set under every route, large requests and bad bodies",
        "",
        f"- command: `python -m bench.soak {' '.join(sys.argv[1:])}`",
        f"- machine: {machine}; date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- code: {code}",
        f"- server: {flags}, default flags otherwise (the reranker: a cross-encoder of MiniLM-L6's shape, "
        "random weights, bench/tiny_model.py)",
        f"- load: {args.clients} concurrent clients for {args.minutes:g} minutes (ended at {load_end:.0f} s, in-flight "
        f"requests answered), then {args.idle_seconds:g} s idle; bench/lib/soak_mix.py's mix",
        f"- memory: every process's resident set (/proc status) each {args.sample_seconds:g} s; start: its first "
        f"sample, before the load; baseline: its highest "
        f"sample in the {args.baseline_seconds:g} s after the first {args.warmup_seconds:g} s; peak: its highest "
        f"sample after that while the load ran; final: its last sample under load; idle: its last sample after "
        f"{args.idle_seconds:g} s idle; tolerance {args.tolerance if args.tolerance is not None else 0.15:.0%}",
        "",
        f"**{'PASS' if passed else 'FAIL'}**: {tally.failed} requests not answered as expected; "
        f"{sum(not v.passed for v in verdicts)} of {len(watch.tracks)} processes past the tolerance"
        + (f"; processes gone during the run: {', '.join(watch.gone)}" if watch.gone else "")
        + (f"; restarted (pids before and after differ): {restarted}" if restarted else ""),
        "",
        "## Memory by process",
        "",
        *memory_table(verdicts),
        "",
        "Each process's highest resident set in each minute (MiB):",
        "",
        *minute_table(watch, load_end),
        "",
        "## Requests",
        "",
        *request_table(tally, load_end),
    ]
    if tally.problems:
        lines += ["", "First problems:", "", *(f"- {p}" for p in tally.problems[:20])]
    return "\n".join(lines) + "\n"
