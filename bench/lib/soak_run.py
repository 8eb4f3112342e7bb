"""`python -m bench.soak --mixed`: serve the default embedder and a reranker, run the mixed load
while every process is sampled, judge each process, write the report. bench/soak.py's docstring
says what passes."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

from bench.lib.common import REPO, ServerProcess, load_texts, machine_description, publish
from bench.lib.process_memory import MemoryWatch, judge, roles
from bench.lib.soak_mix import EMBEDDER, RERANKER, make_texts
from bench.lib.soak_mixed import run_mixed
from bench.lib.soak_report import render

# MiniLM-L6's shape, as ms-marco-MiniLM-L6-v2 has it: the reranker costs what a real one would.
RERANKER_SHAPE = ("--hidden", "384", "--layers", "6", "--heads", "12")


def write_reranker(folder: Path) -> Path:
    out = folder / "reranker"
    subprocess.run([sys.executable, str(REPO / "bench" / "tiny_model.py"), str(out), "--arch", "bert-cross-encoder",
                    *RERANKER_SHAPE], check=True, capture_output=True)
    return out


def code_version() -> str:
    head = subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], cwd=REPO, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True,
                           text=True)
    return f"commit `{head.stdout.strip()}`" + (" with uncommitted changes" if dirty.stdout.strip() else "")


def mixed_soak(args) -> bool:
    paragraphs = load_texts(4000)
    texts = make_texts(paragraphs)
    with tempfile.TemporaryDirectory(prefix="rose-soak-") as folder:
        reranker = args.reranker or write_reranker(Path(folder))
        server_args = ["--model", EMBEDDER, "--model", f"{RERANKER}={reranker}", *args.server_arg]
        server = ServerProcess(*server_args)
        try:
            health = httpx.get(server.url + "/health", timeout=10).json()
            watch = MemoryWatch(roles(server.proc.pid, health))
            tally, load_end = run_mixed(server.url, watch, texts, seconds=args.minutes * 60, clients=args.clients,
                                        idle_seconds=args.idle_seconds, sample_every=args.sample_seconds,
                                        seed=args.seed)
            after = httpx.get(server.url + "/health", timeout=10).json()
        finally:
            server.stop()
    tolerance = 0.15 if args.tolerance is None else args.tolerance
    verdicts = [v for v in (judge(t, args.warmup_seconds, args.baseline_seconds, load_end, tolerance)
                            for t in watch.tracks.values()) if v is not None]
    restarted = sorted(_served_pids(health) ^ _served_pids(after))  # a restarted process has a new pid
    passed = (tally.failed == 0 and not watch.gone and not restarted and len(verdicts) == len(watch.tracks)
              and all(v.passed for v in verdicts))
    report = render(args, server_args, machine_description(), code_version(), watch, verdicts, tally, load_end,
                    restarted, passed)
    publish(report, args.out)
    return passed


def _served_pids(health: dict) -> set[int]:
    return {entry["pid"] for entry in [*health.get("frontends", []), *health.get("engines", [])]}
