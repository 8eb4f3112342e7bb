"""The markdown report of bench/probes/cpu_int8_paths.py: times per way and shape against bf16, the
spread of the rounds, quality per way and kind, and what each way is."""

from __future__ import annotations

import importlib.metadata
import statistics
import sys

SHAPES = {"qkv": "384x1152", "o": "384x384", "up": "384x1536", "down": "1536x384"}


def _versions() -> str:
    found = []
    for package in ("torch", "torchao", "onnxruntime", "openvino"):
        try:
            found.append(f"{package} {importlib.metadata.version(package)}")
        except importlib.metadata.PackageNotFoundError:
            pass
    return ", ".join(found)


def render(ways, skipped, kinds, tokens, times, agree, quality_rows, args, now, machine) -> str:
    med = {key: {name: statistics.median(v) for name, v in samples.items()} for key, samples in times.items()}
    lines = [
        "# int8 linears on the CPU: the ways, timed against F.linear fp32 and bf16 (all-MiniLM-L6-v2's shapes)",
        "",
        f"- command: `python bench/probes/cpu_int8_paths.py {' '.join(sys.argv[1:])}`",
        f"- machine: {machine}; {args.threads} compute threads; {_versions()}; date {now:%Y-%m-%d %H:%M} UTC",
        f"- inputs: the default model's activations at layer {args.timed_layer} (timed) and at every layer "
        "(quality), tests/data/stdlib_docstrings.jsonl",
        "- ms per call, the median of the rounds; x bf16 = bf16 F.linear's ms / the way's ms in the same shape",
    ]
    if skipped:
        lines.append(f"- skipped (package missing): {', '.join(skipped)}")
    spreads = [(max(s["bf16"]) - min(s["bf16"])) / statistics.median(s["bf16"]) for s in times.values() if "bf16" in s]
    if spreads:
        lines.append(f"- noise: bf16's rounds spread (max - min) / median = {statistics.median(spreads):.0%} "
                     f"(median over shapes), {max(spreads):.0%} at worst")
    best = {key: {name: min(v) for name, v in samples.items()} for key, samples in times.items()}
    lines += ["", "## One layer's four linears, summed", "",
              "ms: the sum of the medians; x bf16 by the medians, and by the fastest rounds in brackets", "",
              "| way | " + " | ".join(f"M={m}: ms, x bf16" for m in tokens) + " |", "|---|" + "---|" * len(tokens)]
    for way in ways:
        cells = []
        for m in tokens:
            total = sum(med[(k, m)][way.name] for k in kinds)
            cell = f"{total:.2f}"
            if "bf16" in med[(kinds[0], m)]:
                fastest = sum(best[(k, m)]["bf16"] for k in kinds) / sum(best[(k, m)][way.name] for k in kinds)
                cell += f", {sum(med[(k, m)]['bf16'] for k in kinds) / total:.2f}x ({fastest:.2f}x)"
            cells.append(cell)
        lines.append(f"| {way.name} | " + " | ".join(cells) + " |")
    for kind in kinds:
        lines += ["", f"## {kind} ({SHAPES[kind]})", "", "ms: the median; x bf16 by the medians, and by the "
                  "fastest rounds in brackets", "", _header(tokens)]
        for way in ways:
            cells = [_cell(med[(kind, m)][way.name], med[(kind, m)].get("bf16"), best[(kind, m)][way.name],
                           best[(kind, m)].get("bf16")) for m in tokens]
            lines.append(f"| {way.name} | " + " | ".join(cells) + " |")
    lines += ["", "## Quality: row cosine against fp32 F.linear, every layer, 2,048 tokens each", "",
              "| way | " + " | ".join(f"{k} mean / min" for k in kinds) + " |",
              "|---|" + "---|" * len(kinds)]
    for way in ways:
        cells = [f"{quality_rows[(way.name, k)][0]:.5f} / {quality_rows[(way.name, k)][1]:.5f}" for k in kinds]
        twin = f" (its twin {way.twin}'s)" if way.twin else ""
        lines.append(f"| {way.name}{twin} | " + " | ".join(cells) + " |")
    if agree:
        lines += ["", "## Quality on the timed layer alone, every way run itself (compiled ones too), "
                  "at each M", "", "| way | " + " | ".join(f"{k} mean / min" for k in kinds) + " |",
                  "|---|" + "---|" * len(kinds)]
        for way in ways:
            cells = []
            for k in kinds:
                runs = [agree[(way.name, k, m)] for m in tokens if (way.name, k, m) in agree]
                cells.append(f"{statistics.mean(r[0] for r in runs):.5f} / {min(r[1] for r in runs):.5f}")
            lines.append(f"| {way.name} | " + " | ".join(cells) + " |")
    lines += ["", "## The ways", "", "| way | input | activations | kernel and fusion |", "|---|---|---|---|"]
    for way in ways:
        lines.append(f"| {way.name} | {way.input} | {way.activations} | {way.kernel} |")
    return "\n".join(lines) + "\n"


def _header(tokens) -> str:
    return "| way | " + " | ".join(f"M={m}: ms, x bf16" for m in tokens) + " |\n|---|" + "---|" * len(tokens)


def _cell(ms: float, base: float | None, fastest: float, fastest_base: float | None) -> str:
    return f"{ms:.3f}, {base / ms:.2f}x ({fastest_base / fastest:.2f}x)" if base else f"{ms:.3f}"
