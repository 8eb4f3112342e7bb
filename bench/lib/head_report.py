"""bench/heads.py's markdown report: its command, machine, commit and date, then speed, checks,
bytes per answer and the targets. Measures nothing."""

from __future__ import annotations

import os
import subprocess
import time

from bench.lib.common import REPO, hardware


def commit() -> str:
    """$ROSE_EMBED_COMMIT where set (a device run's copy has the files, not their history), else git's HEAD."""
    named = os.environ.get("ROSE_EMBED_COMMIT")
    if named:
        return named
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=False)
    dirty = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True, check=False)
    found = head.stdout.strip() or "unknown"
    return found + (" with uncommitted changes" if dirty.stdout.strip() else "")


def header(args, num_docs: int, num_tokens: int) -> list[str]:
    return [
        "# Heads: the engine alone, dense against sparse (SPLADE) and a classifier on one backbone",
        "",
        f"- command: `python3 bench/heads.py {' '.join(args.argv)}`",
        f"- machine: {hardware(args.device)}",
        f"- commit {commit()}; date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        (f"- shape {args.shape}, random weights; {num_docs} documents, {num_tokens:,} tokens, the same token ids "
         f"for every head; --max-batch-tokens {args.max_batch_tokens}, --max-batch-seqs {args.max_batch_seqs}; "
         f"sparse: max pooling, activation {args.splade_activation}, no top-k, its bias lowered so that the "
         f"median text keeps {args.active_dims} dimensions; classifier: {args.labels} labels, a sigmoid each"),
        "",
    ]


def speed_table(rows: list[dict], targets: dict[str, float]) -> list[str]:
    dense = next((r for r in rows if r["head"] == "dense"), None)
    lines = [("| head | engine's head | dtype | tok/s | ratio to dense | target | answer row floats | "
              "timed passes: graph replays / eager runs / capture failures |"), "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        rate = r["num_tokens"] / r["seconds"]
        ratio = rate / (dense["num_tokens"] / dense["seconds"]) if dense else None
        target = targets.get(r["head"])
        verdict = "-" if target is None else f">= {target:.2f} {'MET' if ratio >= target else 'NOT MET'}"
        if "failure" in r:  # a wrong head's speed counts for nothing
            verdict = "not counted: its check FAILED"
        c = r["counters"]
        lines.append(f"| {r['head']} | {r['module']} | {r['dtype']} | {rate:,.0f} | "
                     f"{'-' if ratio is None else f'{ratio:.3f}'} | {verdict} | {r['width']} | "
                     f"{c['replays']} / {c['eager']} / {c['capture failures']} |")
    return lines


def check_table(rows: list[dict]) -> list[str]:
    lines = ["", "## Answers against the float32 reference on the same device", "",
             "| head | texts | metric | error | bar | verdict |", "|---|---|---|---|---|---|"]
    for r in rows:
        c = r.get("check")
        if c is None:
            lines.append(f"| {r['head']} | - | - | - | - | FAILED: {r['failure']} |")
        else:
            lines.append(f"| {r['head']} | {c.num_texts} | {c.metric} | {c.error:.3g} | {c.bar:.3g} | passed |")
    return lines


def bytes_table(rows: list[dict]) -> list[str]:
    lines = ["", "## Bytes per text's answer", "", "| head | format | bytes per text |", "|---|---|---|"]
    for r in rows:
        for name, size in r["answer_bytes"].items():
            lines.append(f"| {r['head']} | {name} | {size:,.0f} |")
    sparse = next((r for r in rows if "active_dims" in r), None)
    if sparse:
        mean, most = sparse["active_dims"]
        lines += ["", (f"Sparse non-zero values per text: mean {mean:.1f}, largest {most} "
                       f"(a row holds {(sparse['width'] - 1) // 2} slots).")]
    return lines


def render(rows: list[dict], args, num_docs: int, targets: dict[str, float]) -> str:
    lines = [*header(args, num_docs, rows[0]["num_tokens"] if rows else 0), *speed_table(rows, targets),
             *check_table(rows), *bytes_table(rows),
             "", "## Not measured here", "",
             "- ColBERT (target >= 0.9x of dense): no ColBERT head on this branch.",
             ("- BGE-M3 (XLM-R large, all three outputs >= 0.8x of its dense pass) and the HTTP side "
              "(>= 0.9x of the engine under many clients): other benchmarks' work.")]
    return "\n".join(lines) + "\n"
