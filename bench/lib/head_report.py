"""bench/heads.py's markdown report: its command, machine, commit and date, then speed, checks,
bytes per answer and the targets. Measures nothing."""

from __future__ import annotations

import os
import statistics
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
    documents = (f"{num_docs} documents, {num_tokens:,} tokens, the same token ids for every head; " if args.heads
                 else "the engine-alone arms not run (--heads none); ")
    return [
        "# Heads: each retrieval head against the dense pass of its backbone, the engine alone and over HTTP",
        "",
        f"- command: `python3 bench/heads.py {' '.join(args.argv)}`",
        f"- machine: {hardware(args.device)}",
        f"- commit {commit()}; date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        (f"- random weights: dense, sparse, classifier and colbert at shape {args.shape}, BGE-M3 at {args.m3_shape}; "
         f"{documents}--max-batch-tokens "
         f"{args.max_batch_tokens}, --max-batch-seqs {args.max_batch_seqs} ({args.token_rows_seqs} for the heads "
         f"with a row per token: colbert, bge-m3); sparse: max pooling, activation {args.splade_activation}, no "
         f"top-k, its bias lowered so that the median text keeps {args.active_dims} dimensions; classifier: "
         f"{args.labels} labels, a sigmoid each; colbert: a 128-wide projection, documents mode (the prefix token "
         "put in, punctuation in no row); bge-m3 all: every token a row, as a request for sparse or colbert "
         "outputs is laid out"),
        "",
    ]


def speed_table(rows: list[dict]) -> list[str]:
    rates = {r["head"]: r["num_tokens"] / r["seconds"] for r in rows}
    lines = ["## The engine alone", "",
             ("| arm | engine's head | dtype | tok/s | baseline | ratio to it | target | answer rows | row floats | "
              "timed passes: graph replays / eager runs / capture failures |"),
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        baseline = r["baseline"] or r["head"]
        ratio = rates[r["head"]] / rates[baseline] if baseline in rates else None
        target = r["target"]
        verdict = "-"
        if target is not None:
            verdict = f">= {target:.2f} " + ("not timed" if ratio is None else "MET" if ratio >= target else "NOT MET")
        if "failure" in r:  # a wrong head's speed counts for nothing
            verdict = "not counted: its check FAILED"
        c = r["counters"]
        lines.append(f"| {r['head']} | {r['module']} | {r['dtype']} | {rates[r['head']]:,.0f} | {baseline} | "
                     f"{'-' if ratio is None else f'{ratio:.3f}'} | {verdict} | {r['num_rows']:,} | {r['width']} | "
                     f"{c['replays']} / {c['eager']} / {c['capture failures']} |")
    return lines


def check_table(rows: list[dict]) -> list[str]:
    lines = ["", "## Answers against the float32 reference on the same device", "",
             "| check | texts | metric | error | bar | verdict |", "|---|---|---|---|---|---|"]
    seen = set()
    for r in rows:
        key = r["failure"] if "failure" in r else tuple(c.head for c in r["checks"])
        if key in seen:  # the arms of one checkpoint share its checks
            continue
        seen.add(key)
        if "failure" in r:
            lines.append(f"| {r['head']} | - | - | - | - | FAILED: {r['failure']} |")
        for c in r["checks"]:
            lines.append(f"| {c.head} | {c.num_texts} | {c.metric} | {c.error:.3g} | {c.bar:.3g} | passed |")
    return lines


def bytes_table(rows: list[dict], num_texts: int) -> list[str]:
    lines = ["", (f"## Bytes per text's answer (the mean over the first {num_texts} documents; a ColBERT query's "
                  "over 8 texts of the shared workload, each query_length vectors whatever its length)"), "",
             "| arm | format | bytes per text |", "|---|---|---|"]
    for r in rows:
        for name, size in r["answer_bytes"].items():
            lines.append(f"| {r['head']} | {name} | {size:,.0f} |")
    sparse = next((r for r in rows if "active_dims" in r), None)
    if sparse:
        mean, most = sparse["active_dims"]
        lines += ["", (f"Sparse non-zero values per text: mean {mean:.1f}, largest {most} "
                       f"(a row holds {(sparse['width'] - 1) // 2} slots).")]
    return lines


def http_table(rows: list[dict], target: float) -> list[str]:
    from bench.lib.head_http import median_rate, ratios

    if not rows:
        return []
    lines = ["", "## Over HTTP, many clients, against the engine alone on the same texts", "",
             ("| head | route | texts | tokens | engine alone tok/s | HTTP steady window tok/s | HTTP whole round tok/s "
              "| HTTP / engine (median of rounds) | per round | target | answers checked | worst cosine | "
              "failed requests |"), "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        per_round, basis = ratios(r)
        ratio = statistics.median(per_round)
        windows = [w for w in r["window_rates"] if w is not None]
        verdict = f">= {target:.2f} " + ("MET" if ratio >= target else "NOT MET")
        if r["failures"]:
            verdict = "not counted: FAILED answers"
        lines.append(f"| {r['head']} | {r['route']} | {r['num_texts']:,} | {r['num_tokens']:,} | "
                     f"{median_rate(r, 'engine_seconds'):,.0f} | "
                     f"{f'{statistics.median(windows):,.0f}' if windows else '-'} | "
                     f"{median_rate(r, 'http_seconds'):,.0f} | {ratio:.3f} ({basis}) | "
                     f"{', '.join(f'{x:.2f}' for x in per_round)} | {verdict} | {r['checked']:,} | {r['worst']:.6f} | "
                     f"{len(r['failures'])} |")
    lines.append("")
    for r in rows:
        shares = r["client_shares"]
        lines.append(f"- {r['head']}: server flags `{' '.join(r['flags'])}`; client processes' CPU share of a core "
                     f"while sending: max {max(shares):.0%}" if shares else f"- {r['head']}: no HTTP round")
        lines += [f"  - failed: {line}" for line in r["failures"][:5]]
    return lines


def render(rows: list[dict], http_rows: list[dict], args, num_docs: int, num_tokens: int, http_target: float) -> str:
    lines = [*header(args, num_docs, num_tokens)]
    if rows:
        lines += [*speed_table(rows), *check_table(rows), *bytes_table(rows, min(args.bytes_texts, num_docs))]
    lines += http_table(http_rows, http_target)
    return "\n".join(lines) + "\n"
