"""rose-embed on the CPU against sentence-transformers and its CPU backends, in one run: how fast
each embeds the same texts, and how far its vectors are from sentence-transformers float32's.

    python3 -m venv /tmp/cpu-compare-venv
    /tmp/cpu-compare-venv/bin/pip install torch==2.13.0 sentence-transformers==6.3.0 transformers==5.25.0 \\
        onnx==1.23.2 onnxruntime==1.32.0 openvino==2026.4.1 nncf==3.4.0
    python bench/cpu_compare.py --peer-python /tmp/cpu-compare-venv/bin/python --out bench/results/cpu/cpu-compare.md

The peers (sentence-transformers float32 and under bf16 autocast, ONNX Runtime float32 and
int8, OpenVINO defaults and int8: bench/lib/cpu_peers.py) run in one process of their own
environment, each in-process: their ONNX and OpenVINO backends need packages that do not
install beside the project's transformers (bench/lib/cpu_peers.py says which and how it does
without them). rose-embed runs as servers with default flags and each `--variants` entry's
flags, all started before timing, reached through HTTP: --clients lean clients in one
process on the same cores (bench/load_gen.py's round: requests of 1 to --max-request-texts
texts, float and base64 mixed). A variant whose server does not start (exit status 2: it
refuses the flags) is reported, not timed.

Every round runs every system once on the same --num-texts paragraphs, in an order rotated
by one each round. The machine may be shared: a run is dropped when other processes used more
than --max-other-load cores on average while it ran (all CPU time of /proc/stat, stolen time
included, less this process tree's), and run again, up to --retries times. Before each run
the benchmark waits (up to --max-wait seconds) for a second in which the others stay under
that load. A system's speed is the median of its kept runs. A peer's run is its encode call;
a server's is its HTTP round from the first request sent to the last answer (as
bench/load_gen.py counts it), without the round's common-start delay and without the client's
decoding of the answers afterwards, which no peer pays.
The client process's CPU share of a core is reported for each server (its median and largest
over the timed rounds): a client near a whole core would measure itself, not the server.
Quality is against sentence-transformers float32, over every run (kept or not) and
--num-queries queries embedded once more, untimed: the mean and the least cosine of every
vector, and how many of each query's top 10 among the paragraphs agree
(bench/probes/cpu_int8_model_quality.py's `quality`).
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib.common import (REPO, ServerProcess, load_texts, machine_busy_seconds,  # noqa: E402
                              machine_description, process_cpu_seconds, publish)
from bench.probes.cpu_int8_model_quality import CALIBRATION_FROM, NUM_CALIBRATION, QUERIES_FROM, quality  # noqa: E402
from bench.load_gen import http_round  # noqa: E402
from bench.lib.traffic import make_plan, run_worker  # noqa: E402

PEERS = {
    "st-fp32": "sentence-transformers fp32",
    "st-bf16-autocast": "sentence-transformers fp32 under bf16 autocast",
    "ort-fp32": "ONNX Runtime fp32",
    "ort-int8": "ONNX Runtime int8 (dynamic, per-tensor activations)",
    "openvino": "OpenVINO defaults",
    "openvino-int8": "OpenVINO int8 (NNCF static, calibrated on other texts)",
}
REFERENCE = "st-fp32"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--peer-python", type=Path, default=None,
                   help="the Python of the peers' environment (see above); sentence-transformers fp32 runs there")
    p.add_argument("--peers", default=",".join(PEERS), help=f"comma-separated, from {', '.join(PEERS)}; "
                                                            f"{REFERENCE} always runs (the reference)")
    p.add_argument("--variants", default="default;--dtype float32;--dtype bfloat16;--quantization int8",
                   help="rose-embed servers, ';'-separated serve flags each (default: no flags); write "
                        "--variants='...'")
    p.add_argument("--num-texts", type=int, default=1200, help="paragraphs embedded by every system each round")
    p.add_argument("--num-queries", type=int, default=200, help="queries for the top-10 agreement")
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--max-request-texts", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--max-other-load", type=float, default=0.1,
                   help="drop a run while which other processes used more cores than this on average")
    p.add_argument("--retries", type=int, default=2, help="times a dropped run is run again")
    p.add_argument("--max-wait", type=float, default=30.0,
                   help="seconds to wait before each run for the others to go quiet")
    p.add_argument("--out", type=Path, default=None, help="write the markdown report here")
    args = p.parse_args(argv)
    if args.num_texts > QUERIES_FROM:
        p.error(f"--num-texts must be at most {QUERIES_FROM}: the queries come after the paragraphs")
    unknown = set(args.peers.split(",")) - set(PEERS) - {""}
    if unknown:
        p.error(f"unknown peers: {', '.join(sorted(unknown))}")
    if args.peer_python is None:
        p.error("--peer-python is needed: sentence-transformers fp32, the reference, runs in the peers' environment")
    return args


class Timed:
    """Wall seconds of a block, and the cores other processes kept busy meanwhile (on average)."""

    def __enter__(self):
        self._busy, self._ours = machine_busy_seconds(), process_cpu_seconds(os.getpid())
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self._start
        ours = process_cpu_seconds(os.getpid()) - self._ours
        self.other_load = max(0.0, machine_busy_seconds() - self._busy - ours) / self.seconds


def wait_for_quiet(max_other_load: float, max_wait: float) -> None:
    """Return after a second in which other processes kept at most `max_other_load` cores busy,
    or after `max_wait` seconds."""
    deadline = time.monotonic() + max_wait
    while time.monotonic() < deadline:
        with Timed() as idle:
            time.sleep(1.0)
        if idle.other_load <= max_other_load:
            return


def kept_runs(seconds: list[float], other_load: list[float], max_other_load: float) -> list[float]:
    """The runs that other processes did not disturb."""
    return [s for s, load in zip(seconds, other_load) if load <= max_other_load]


class PeerProcess:
    """bench/lib/cpu_peers.py in the peers' environment; vectors come back through .npy files."""

    def __init__(self, python: Path, model: Path, texts: dict[str, list[str]], systems: list[str], folder: Path):
        self.folder = folder
        (folder / "texts.json").write_text(json.dumps(texts))
        self.proc = subprocess.Popen([str(python), str(REPO / "bench" / "lib" / "cpu_peers.py")], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, cwd=folder)
        self.describe = self._ask({"op": "load", "model": str(model), "texts": str(folder / "texts.json"),
                                   "systems": systems})["loaded"]

    def _ask(self, request: dict) -> dict:
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"bench/lib/cpu_peers.py exited with {self.proc.wait()} (its stderr is above)")
        return json.loads(line)

    def encode(self, system: str, which: str) -> np.ndarray:
        out = self.folder / f"{system}-{which}.npy"
        self._ask({"op": "encode", "system": system, "set": which, "out": str(out)})
        return np.load(out)

    def stop(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(60)


class RoseServer:
    """A server with one variant's flags, reached by lean clients (bench/load_gen.py's round)."""

    def __init__(self, flags: str, args: argparse.Namespace, pool: ProcessPoolExecutor, texts: list[str],
                 queries: list[str]):
        self.flags, self.args, self.pool, self.texts = flags, args, pool, texts
        self.server = ServerProcess("--devices", "cpu", *shlex.split(flags))
        self.plan = make_plan(len(texts), args.max_request_texts, args.seed, ("float", "base64"))
        self.client_shares: list[float] = []  # the client process's CPU share of a core, each timed round
        self.embed()  # warm-up: every shape of the timed rounds once
        self.client_shares.clear()
        result = run_worker(self.server.url, queries, make_plan(len(queries), args.max_request_texts, args.seed,
                                                                ("float",)), args.clients, None, 0.0)
        self.queries = self._in_order(result.indices, result.vectors, len(queries), result.errors)

    @staticmethod
    def _in_order(indices: np.ndarray, vectors: np.ndarray, n: int, errors: list[str]) -> np.ndarray:
        if errors or sorted(indices.tolist()) != list(range(n)):
            raise RuntimeError(f"{len(indices)} vectors for {n} texts; errors: {errors[:3]}")
        ordered = np.empty_like(vectors)
        ordered[indices] = vectors
        return ordered

    def embed(self) -> tuple[np.ndarray, float]:
        """The texts' vectors, in order, and the round's seconds from its first request to its last answer."""
        # Texts, not tokens, stand in the prefix that bench/lib/traffic.py's steady window counts in:
        # this benchmark reports whole rounds only.
        measured = http_round(self.pool, 1, self.server.url, self.texts, self.plan, self.args.clients, None,
                              np.arange(len(self.texts) + 1))
        self.client_shares.extend(measured.client_shares)
        return self._in_order(measured.indices, measured.vectors, len(self.texts), measured.errors), measured.seconds

    def stop(self) -> None:
        self.server.stop()


def rose_name(flags: str) -> str:
    return "rose-embed, default flags" if not flags else f"rose-embed `{flags}`"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the servers and the peers on the way out
    from rose_embed.engine.model_files.loader import load_spec

    docstrings = load_texts(CALIBRATION_FROM + NUM_CALIBRATION)
    texts = {"passages": docstrings[:args.num_texts],
             "queries": docstrings[QUERIES_FROM:QUERIES_FROM + args.num_queries],
             "calibration": docstrings[CALIBRATION_FROM:]}
    peers = [REFERENCE, *(p for p in args.peers.split(",") if p and p != REFERENCE)]
    variants = ["" if v.strip() == "default" else v.strip() for v in args.variants.split(";") if v.strip()]
    seconds: dict[str, list[float]] = {}
    other_load: dict[str, list[float]] = {}
    vectors: dict[str, list[np.ndarray]] = {}
    refused: dict[str, str] = {}  # variant: why its server did not start
    servers: dict[str, RoseServer] = {}
    with tempfile.TemporaryDirectory(prefix="cpu-compare-") as folder, \
            ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(time.sleep, [0.1]))  # the client process starts before any timing
        peer = PeerProcess(args.peer_python, load_spec(None).path, texts, peers, Path(folder))
        try:
            for flags in variants:
                try:
                    servers[rose_name(flags)] = RoseServer(flags, args, pool, texts["passages"], texts["queries"])
                except RuntimeError as exc:
                    refused[rose_name(flags)] = str(exc)
            # Each run gives its vectors and its own seconds where it times itself (None: the wall time).
            runs = {**{PEERS[p]: (lambda p=p: (peer.encode(p, "passages"), None)) for p in peers},
                    **{name: server.embed for name, server in servers.items()}}
            queries = {**{PEERS[p]: peer.encode(p, "queries") for p in peers},
                       **{name: server.queries for name, server in servers.items()}}
            for r in range(args.rounds):
                # The machine may be shared: rotate the order so no system always runs first or last.
                order = list(runs)[r % len(runs):] + list(runs)[:r % len(runs)]
                for name in order:
                    for _ in range(1 + args.retries):
                        wait_for_quiet(args.max_other_load, args.max_wait)
                        with Timed() as timed:
                            got, own_seconds = runs[name]()
                        run_seconds = timed.seconds if own_seconds is None else own_seconds
                        seconds.setdefault(name, []).append(run_seconds)
                        other_load.setdefault(name, []).append(timed.other_load)
                        vectors.setdefault(name, []).append(got)
                        kept = timed.other_load <= args.max_other_load
                        print(f"round {r}, {name}: {run_seconds:.2f} s, other load {timed.other_load:.2f}"
                              + ("" if kept else " (dropped)"), flush=True)
                        if kept:
                            break
        finally:
            for server in servers.values():
                server.stop()
            peer.stop()
    client_shares = {name: server.client_shares for name, server in servers.items()}
    report = render(args, peer.describe, list(runs), seconds, other_load, vectors, queries, refused, variants,
                    client_shares)
    publish(report, args.out)
    return 0


def render(args, describe, names, seconds, other_load, vectors, queries, refused, variants, client_shares) -> str:
    import torch

    from rose_embed.engine.rose.cpu_features import native_bf16
    from rose_embed.engine.rose.engine import resolve_dtype

    kept = {n: kept_runs(seconds[n], other_load[n], args.max_other_load) for n in names}
    median = {n: statistics.median(kept[n]) if kept[n] else float("nan") for n in names}
    reference_name = PEERS[REFERENCE]
    reference = [np.concatenate([v, queries[reference_name]]) for v in vectors[reference_name]]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip() or "unknown"
    changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True,
                             text=True).stdout.strip()
    commit += " with uncommitted changes" if changed else ""
    dtype, why = resolve_dtype("auto", torch.device("cpu"))
    lines = [
        "# rose-embed on the CPU against sentence-transformers and its CPU backends",
        "",
        f"- command: `python bench/cpu_compare.py {shlex.join(sys.argv[1:])}`",
        f"- machine: {machine_description()}; native bf16: {native_bf16() or 'none'}; "
        f"date {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; commit {commit}",
        f"- model: the embedded all-MiniLM-L6-v2; rose-embed's default dtype here: {str(dtype).removeprefix('torch.')} "
        f"({why})",
        f"- workload: the first {args.num_texts:,} paragraphs of tests/data/stdlib_docstrings.jsonl, every system "
        f"once a round, {args.rounds} rounds in rotated order; rose-embed through HTTP, {args.clients} lean clients "
        f"in one process on the same cores, requests of 1-{args.max_request_texts} texts (seed {args.seed}), float "
        "and base64; the peers in-process (bench/lib/cpu_peers.py), batches of 32",
        f"- disturbance: a run is dropped (and run again, up to {args.retries} times) when other processes kept "
        f"more than {args.max_other_load} cores busy on average while it ran; "
        f"{sum(len(seconds[n]) - len(kept[n]) for n in names)} of {sum(len(seconds[n]) for n in names)} runs "
        "dropped; the last column's median takes every run",
        f"- quality against sentence-transformers fp32, over every run: cosine of every vector, and top-10 "
        f"agreement of {args.num_queries} single-docstring queries (from docstring {QUERIES_FROM} on) over the "
        f"{args.num_texts:,} paragraphs",
        "",
        "| system | texts/s | x ST fp32 | mean cos | min cos | top-10 agreement | runs kept | texts/s, all runs | "
        "client CPU, share of a core |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for n in names:
        measured = [quality(np.concatenate([v, queries[n]]), ref, args.num_texts)
                    for v, ref in zip(vectors[n], reference)]
        mean_cos = statistics.mean(m[0] for m in measured)
        min_cos = min(m[1] for m in measured)
        top10 = statistics.mean(m[2] for m in measured)
        lines.append(f"| {n} | {args.num_texts / median[n]:.1f} | {median[reference_name] / median[n]:.2f} | "
                     f"{mean_cos:.5f} | {min_cos:.5f} | {top10:.3f} | {len(kept[n])} of {len(seconds[n])} | "
                     f"{args.num_texts / statistics.median(seconds[n]):.1f} | {_client_share(client_shares.get(n))} |")
    lines += ["", "Peers: " + "; ".join(f"{k}: {v}" for k, v in describe.items() if k != "versions")
              + f". Their environment: {describe['versions']}."]
    lines += ["", "rose-embed variants: " + "; ".join(f"`{v or '(no flags)'}`" for v in variants)
              + "; each server `--devices cpu` and the variant's flags."]
    if refused:
        lines += ["", "Not timed, the server did not start (exit status 2: it refuses the flags): "
                  + "; ".join(f"{n} ({why})" for n, why in refused.items()) + "."]
    lines += ["", "Runs (s, and other processes' load in cores): "
              + "; ".join(f"{n}: " + ", ".join(f"{s:.2f} ({load:.2f})" for s, load in zip(seconds[n], other_load[n]))
                          for n in names)]
    return "\n".join(lines) + "\n"


def _client_share(shares: list[float] | None) -> str:
    """The median and the largest of a server's client CPU shares over its runs; "-" for a peer (in-process)."""
    if not shares:
        return "-"
    return f"{statistics.median(shares):.1%} (at most {max(shares):.1%})"


if __name__ == "__main__":
    sys.exit(main())
