"""End-to-end load generator: the real server under realistic traffic, with its baselines in one run.

    python bench/load_gen.py --device cpu --num-texts 400 --rounds 9 --clients 16 --out bench/results/http/e2e-cpu.md
    python bench/load_gen.py --device cuda --model DIR --num-texts 12061 --repeat 4 --clients 96 --procs 8 \
        --out bench/results/http/e2e-gpu.md
    python bench/load_gen.py --pattern bulk --device cuda --model DIR --num-texts 12000 --out FILE

The server runs with default flags (what users run); `--server-arg=...` adds a variant's flag.
Clients are lean (bench/lib/lean_http.py: raw HTTP/1.1, bodies encoded beforehand, responses read
as bytes) in spawned processes, each reporting its CPU share of a core; a request lost below
HTTP (reset, broken pipe, closed without a response) is a failed request like a non-200.

Two patterns of traffic:
- `many` (the default; bench/lib/traffic.py): many clients, requests of 1 to 64 texts, `float`
  and `base64` mixed. Each round times, in turn and on the same texts: the engine alone with
  the texts' ids (tokenized beforehand: the device's own speed), the engine alone on the
  texts (Engine.embed in this process, same model/device/dtype/budget as the server),
  sentence-transformers encode(), and the server over HTTP. The HTTP rate is given for the
  whole round (first send to last answer) and for its steady window, while every client is
  busy (bench/lib/traffic.py's `steady_window`). Then a latency mode sends single short queries
  one at a time. Every vector that comes back is checked against the engine's vector for
  its text (cosine >= --min-cosine).
- `bulk` (bench/lib/bulk.py): 1, 2, 4, 8 client processes each sending 1,000-text (or 100-text)
  requests back to back, a timed window, against the engine alone with ids.
The run fails (exit 1) on any mismatch or failed request.

Results in bench/results/http/ (the GPU ones on a lent H200 with random weights of each shape,
bench/tiny_model.py; `bench/gpu_session.sh paragraphs|bulk|profile` runs them there):
  e2e-cpu.md        python bench/load_gen.py --device cpu --num-texts 400 --rounds 9 --clients 16 --latency-queries 200
  e2e-gpu-bert-base.md, e2e-gpu-qwen3.md, e2e-gpu-minilm.md   (bench/gpu_session.sh paragraphs)
                    python bench/load_gen.py --device cuda --clients 96 --procs 8 --rounds 3 --no-st
                        --model /tmp/<shape>-random --num-texts 12061 --repeat 4 (qwen3: 8, minilm: 16)
                        --latency-queries 200
  bulk-gpu-minilm.md, bulk-gpu-bert-base.md   (bench/gpu_session.sh bulk)
                    python bench/load_gen.py --pattern bulk --device cuda --model /tmp/<shape>-random
                        --num-texts 12000 --request-texts 1000,100 --bulk-clients 1,2,4,8 --window 4 --warmup 1
                        --rounds 2
  e2e-gpu-minilm-k4.md, -k6.md, -k8.md
                    the same for MiniLM with --rounds 2 --latency-queries 0 --server-arg=--frontend-workers=K
  e2e-gpu-minilm-k12.md, -k14.md
                    MiniLM paragraphs as e2e-gpu-minilm.md with --rounds 1 --latency-queries 0
                        --server-arg=--frontend-workers=K
  e2e-gpu-bert-base-docs.md
                    the same for BERT-base with --num-texts 3000 --join 4 --repeat 4 --latency-queries 0
  e2e-gpu-bert-base-profiled.md, e2e-gpu-bert-base.pyspy.txt   (bench/gpu_session.sh profile)
                    the same for BERT-base paragraphs with --latency-queries 0 --py-spy e2e-gpu-bert-base.pyspy.txt
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import multiprocessing
import shlex
import shutil
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# Only light imports at the top: the spawned client processes import this module again.
from bench.lib.common import (DEFAULT_DATA, ServerProcess, VectorCheck, build_texts, cosine_rows,  # noqa: E402
                          hardware, load_texts, process_cpu_seconds, publish)
from bench.lib.traffic import (EMBEDDINGS, STEADY_WINDOW_LATENCIES, PlannedRequest, Route,  # noqa: E402
                           make_plan, run_latency, run_worker, steady_bounds, steady_window)
from rose_embed.engine.rose.cublas_workspace import give_cublas_no_workspace  # noqa: E402
from rose_embed.engine.rose.quantization.support import QUANTIZATIONS  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default=None, help="attach to a running server instead of starting one "
                                               "(it must serve the same model, device and dtype)")
    p.add_argument("--device", default="cpu",
                   help="the engine-alone baseline's device (Engine.embed in this process); the server "
                        "picks its own (every visible GPU, else the CPU), told `--devices cpu` for cpu")
    p.add_argument("--model", default=None, help="model directory or hub id (default: the embedded MiniLM)")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--quantization", choices=QUANTIZATIONS, default=None,
                   help="the engine alone and the server both with --quantization (docs/fp8.md, docs/cpu-int8.md)")
    p.add_argument("--max-batch-tokens", type=int, default=16384)
    p.add_argument("--server-arg", action="append", default=[],
                   help="extra `serve` flag, passed through (repeatable; write --server-arg=--flag)")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--num-texts", type=int, default=600, help="paragraphs (or documents, see --join) per round")
    p.add_argument("--join", type=int, default=1, help="paragraphs joined into one text (4: document-sized texts)")
    p.add_argument("--repeat", type=int, default=1, help="send the texts this many times per round (longer rounds)")
    p.add_argument("--clients", type=int, default=16, help="concurrent connections, spread over --procs")
    p.add_argument("--procs", type=int, default=1, help="client processes (one cannot parse a GPU's output)")
    p.add_argument("--max-request-texts", type=int, default=64)
    p.add_argument("--formats", default="float,base64", help="encoding formats drawn per request")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--latency-queries", type=int, default=200, help="single short queries (0: skip)")
    p.add_argument("--st-batch-size", type=int, default=32)
    p.add_argument("--no-st", action="store_true", help="skip sentence-transformers")
    p.add_argument("--min-cosine", type=float, default=None,
                   help="least cosine to the engine's vector (default 0.9999 for fp32, 0.999 otherwise)")
    p.add_argument("--py-spy", type=Path, default=None, help="record the server with py-spy in the last HTTP "
                                                             "round (raw stacks here, summary in the report); "
                                                             "bulk: while the fewest clients send the first size")
    p.add_argument("--out", type=Path, default=None, help="write the markdown report here")
    bulk = p.add_argument_group("the bulk pattern (--pattern bulk, bench/lib/bulk.py)")
    bulk.add_argument("--pattern", choices=("many", "bulk", "mixed"), default="many",
                      help="many: many clients, small mixed requests (the default); bulk: a few clients, each "
                           "sending large requests back to back; mixed: one-text queries beside bulk clients "
                           "(bench/lib/mixed.py)")
    bulk.add_argument("--bulk-clients", default="1,2,4,8", help="client processes, one measurement per count")
    bulk.add_argument("--request-texts", default="1000,100",
                      help="texts per request, one measurement per size (LangChain sends 1,000, LlamaIndex 100)")
    bulk.add_argument("--window", type=float, default=5.0, help="seconds of the timed window per measurement")
    bulk.add_argument("--warmup", type=float, default=1.0, help="seconds the clients send before the window opens")
    mixed = p.add_argument_group("the mixed pattern (--pattern mixed, bench/lib/mixed.py; --bulk-clients, the first "
                                 "--request-texts, --window and --warmup as above)")
    mixed.add_argument("--query-clients", type=int, default=8, help="connections sending one short text at a time")
    mixed.add_argument("--query-gap", type=float, default=0.02, help="seconds a query client waits between queries")
    mixed.add_argument("--overload-clients", type=int, default=0,
                       help="then this many bulk clients against the default server (0: no overload run)")
    mixed.add_argument("--overload-seconds", type=float, default=240.0)
    mixed.add_argument("--no-baseline", action="store_true",
                       help="measure the default server only, not the --scheduling fcfs baseline beside it")
    return p.parse_args(argv)


def server_flags(args: argparse.Namespace) -> list[str]:
    """The server's own defaults pick its devices (every visible GPU, else the CPU); only a CPU run
    on a machine with a GPU names the CPU."""
    devices = ["--devices", "cpu"] if args.device == "cpu" else []
    return [*devices, "--dtype", args.dtype, "--max-batch-tokens", str(args.max_batch_tokens),
            *(["--model", args.model] if args.model else []),
            *(["--quantization", args.quantization] if args.quantization else []), *args.server_arg]


def default_server_flags(args: argparse.Namespace) -> list[str]:
    """The server as users start it: its own dtype and batch budget; the model, the CPU where asked,
    and --server-arg's flags."""
    devices = ["--devices", "cpu"] if args.device == "cpu" else []
    return [*devices, *(["--model", args.model] if args.model else []), *args.server_arg]


def short_queries(path: Path, engine, n: int) -> list[str]:
    """The first n texts of 4 to 16 tokens (a search box query's size), from the back of the file."""
    pool = load_texts(100_000, path)[::-1]
    lengths = [len(ids) for ids in engine.tokenize(pool)]
    return [t for t, k in zip(pool, lengths) if 4 <= k <= 16][:n]


ROUND_START_DELAY = 0.5  # seconds from http_round's call to its clients' common start: every process ready


@dataclass
class HttpRound:
    seconds: float  # from the first send to the last answer
    window_seconds: float  # the steady window's (bench/lib/traffic.py), 0 if the round had none
    window_tokens: int  # the tokens of the requests answered inside that window
    client_cpu: float
    client_shares: list[float]  # each client process's CPU share of a core while sending
    latencies: list[float]
    indices: np.ndarray
    vectors: np.ndarray
    errors: list[str]  # failed requests, transport errors included
    transport_errors: int
    window_bounds: tuple[float, float] = (0.0, 0.0)  # when the steady window opens and closes, time.monotonic()


def http_round(pool: ProcessPoolExecutor, procs: int, url: str, texts: list[str], plan: list[PlannedRequest],
               clients: int, model: str | None, token_prefix: np.ndarray, route: Route = EMBEDDINGS,
               dim: int | None = None) -> HttpRound:
    """All client processes start together; the whole round lasts from the first send to the
    last answer, and its steady window is bench/lib/traffic.py's `steady_window`. `route` and `dim`:
    run_worker's, for routes other than /v1/embeddings' vectors."""
    start_at = time.monotonic() + ROUND_START_DELAY
    shares = [plan[i::procs] for i in range(procs)]
    counts = [clients // procs + (i < clients % procs) for i in range(procs)]
    futures = [pool.submit(run_worker, url, texts, share, max(1, n), model, start_at, route, dim)
               for share, n in zip(shares, counts)]
    results = [f.result() for f in futures]
    started = min(r.started for r in results)
    window_seconds, window_tokens = steady_window(results, token_prefix)
    indices = np.concatenate([r.indices for r in results])
    vectors = np.concatenate([r.vectors for r in results if len(r.vectors)]) if len(indices) else np.zeros((0, 0))
    return HttpRound(max(r.finished for r in results) - started, window_seconds, window_tokens,
                     sum(r.cpu_seconds for r in results), [r.cpu_share for r in results],
                     [x for r in results for x in r.latencies], indices, vectors,
                     [e for r in results for e in r.errors], sum(r.transport_errors for r in results),
                     steady_bounds(results))


def percentile_ms(values: list[float], q: float) -> float:
    return 1000 * float(np.percentile(values, q)) if values else float("nan")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    give_cublas_no_workspace()  # as the server's engine processes run
    if args.py_spy is not None and shutil.which("py-spy") is None:
        sys.exit("load_gen: --py-spy needs py-spy on PATH (pip install py-spy), or leave the flag out")
    from rose_embed.engine.contract.config import EngineConfig
    from rose_embed.engine.rose.engine import Engine

    # Every graph captured before timing, as the server does by default: the engine-alone paths
    # never pay a capture inside the window.
    engine = Engine(EngineConfig(model=args.model, device=args.device, dtype=args.dtype,
                                 max_batch_tokens=args.max_batch_tokens, capture_at_start=True,
                                 quantization=args.quantization))
    engine.warm_up()
    # FP8 rows may round one e4m3 step apart where the server's batches compose other GEMM tiles; int8
    # rows one int8 step apart where the attention's grouping of a batch differs.
    default_cosine = 0.998 if args.quantization else 0.999
    min_cosine = args.min_cosine or (0.9999 if str(engine.dtype) == "torch.float32" else default_cosine)
    if args.pattern == "bulk":
        from bench.lib.bulk import run_bulk

        return run_bulk(args, engine, min_cosine, server_flags(args))
    if args.pattern == "mixed":
        from bench.lib.mixed import run_mixed

        return run_mixed(args, engine, min_cosine, default_server_flags(args))
    return run_many(args, engine, min_cosine)


def run_many(args: argparse.Namespace, engine, min_cosine: float) -> int:
    """Many clients, requests of 1 to --max-request-texts texts, against the engine alone and
    sentence-transformers, round after round."""
    from bench.embed_pipeline import run_ids
    from bench.lib.profile_summary import PySpy, summarize

    texts = build_texts(args.data, args.num_texts, args.join) * args.repeat
    num_tokens = sum(len(ids) for ids in engine.tokenize(texts))
    plan = make_plan(len(texts), args.max_request_texts, args.seed, tuple(args.formats.split(",")))
    queries = short_queries(args.data, engine, args.latency_queries) if args.latency_queries else []
    reference = engine.embed(texts)  # also the engine's warm-up on exactly these shapes

    st = None
    if not args.no_st:
        from sentence_transformers import SentenceTransformer

        st = SentenceTransformer(str(engine.spec.path), device=str(engine.device), model_kwargs={"dtype": engine.dtype})
        st.encode(texts[:256], batch_size=args.st_batch_size)

    server_args = server_flags(args)
    server = None if args.url else ServerProcess(*server_args)
    url = args.url or server.url
    seqs = engine.tokenize(texts)  # the ids-in path's input, tokenized before any timing
    token_prefix = np.concatenate([[0], np.cumsum([len(ids) for ids in seqs])])
    window_rates: list[float] = []  # tokens/s of each HTTP round's window
    window_shares: list[float] = []  # the share of the workload's tokens answered inside it
    names = [IDS_IN, "engine alone (Engine.embed, no HTTP)",
             f"HTTP, {args.clients} clients x 1-{args.max_request_texts} texts, whole round"]
    if st is not None:
        names.insert(0, f"sentence-transformers encode(batch_size={args.st_batch_size})")
    timings: dict[str, list[float]] = {n: [] for n in names}
    # CPU seconds per path and round: on a shared machine wall time depends on how many
    # threads each path has runnable against the others' load; CPU time much less so.
    cpu_times: dict[str, list[float]] = {n: [] for n in names}
    server_cpu: list[float] = []
    check = VectorCheck(min_cosine)
    request_latencies: list[float] = []
    errors: list[str] = []
    client_shares: list[float] = []  # every client process of every HTTP round
    transport_errors = 0
    batch_sizes = ""
    profile_lines: list[str] = []
    st_worst = None
    try:
        with ProcessPoolExecutor(args.procs, mp_context=multiprocessing.get_context("spawn")) as pool:
            list(pool.map(time.sleep, [0.1] * args.procs))  # start the workers before any timing
            run_worker(url, texts, plan[:8], 4, None, 0.0)  # server warm-up: first requests of the plan

            def time_engine() -> float:
                t, cpu = time.perf_counter(), time.process_time()
                engine.embed(texts)
                cpu_times[names[-2]].append(time.process_time() - cpu)
                return time.perf_counter() - t

            def time_ids() -> float:
                t, cpu = time.perf_counter(), time.process_time()
                run_ids(engine, seqs)
                cpu_times[IDS_IN].append(time.process_time() - cpu)
                return time.perf_counter() - t

            def time_st() -> float:
                nonlocal st_worst
                t, cpu = time.perf_counter(), time.process_time()
                st_vectors = st.encode(texts, batch_size=args.st_batch_size, convert_to_numpy=True)
                seconds = time.perf_counter() - t
                cpu_times[names[0]].append(time.process_time() - cpu)
                st_worst = float(cosine_rows(st_vectors.astype(np.float32), reference).min())
                return seconds

            def time_http(profile: Path | None) -> float:
                nonlocal transport_errors
                before = process_cpu_seconds(server.proc.pid) if server is not None else 0.0
                with PySpy(server.proc.pid, profile) if profile else contextlib.nullcontext():
                    measured = http_round(pool, args.procs, url, texts, plan, args.clients, None, token_prefix)
                spent = process_cpu_seconds(server.proc.pid) - before if server is not None else float("nan")
                server_cpu.append(spent)
                cpu_times[names[-1]].append(spent + measured.client_cpu)
                if profile:
                    profile_lines[:] = summarize(profile)
                request_latencies.extend(measured.latencies)
                errors.extend(measured.errors)
                client_shares.extend(measured.client_shares)
                transport_errors += measured.transport_errors
                # Every vector of every round is checked against the engine's for its text.
                if sorted(measured.indices.tolist()) != list(range(len(texts))):
                    errors.append(f"{len(measured.indices)} vectors came back for {len(texts)} texts")
                check.add(measured.vectors, reference[measured.indices])
                if measured.window_seconds > 0:
                    window_rates.append(measured.window_tokens / measured.window_seconds)
                    window_shares.append(measured.window_tokens / num_tokens)
                return measured.seconds

            batches_before = server_batch_totals(url) if server is not None else None
            for r in range(args.rounds):
                profile = args.py_spy if server is not None and r == args.rounds - 1 else None
                paths = {IDS_IN: time_ids, names[-2]: time_engine, names[-1]: lambda: time_http(profile)}
                if st is not None:
                    paths[names[0]] = time_st
                # The machine may be shared: rotate the order so no path always runs first or last.
                order = list(paths)[r % len(paths):] + list(paths)[: r % len(paths)]
                for name in order:
                    timings[name].append(paths[name]())
                print(f"round {r}: " + ", ".join(f"{n}: {v[-1]:.2f} s" for n, v in timings.items()), flush=True)
            if server is not None:  # the HTTP rounds' batches alone: not warm-up's, nor the latency queries'
                tokens, sent, ran = (after - before for after, before in zip(server_batch_totals(url), batches_before))
                batch_sizes = f"{tokens / max(1.0, sent):.0f} tokens per batch the front ends sent, " \
                    f"{tokens / max(1.0, ran):.0f} per batch the engines ran " \
                    f"in the HTTP rounds, {ids_mean_batch_tokens(engine, seqs):.0f} on the engine alone with ids in"
        latencies: list[float] = []
        if queries:
            latencies, lat_indices, lat_vectors, errs = run_latency(url, queries, None)
            errors += errs
            check.add(lat_vectors, engine.embed(queries)[lat_indices])
    finally:
        if server is not None:
            server.stop()

    report = render(args, engine, timings, cpu_times, server_cpu, names, num_tokens, len(texts), request_latencies,
                    latencies, check, st_worst, errors, profile_lines, server_args, batch_sizes,
                    window_rates, window_shares, client_shares, transport_errors)
    publish(report, args.out)
    return 1 if check.mismatches or errors else 0


IDS_IN = "engine alone, ids in (tokenized beforehand, no HTTP)"
WINDOW = "HTTP, steady window"


def server_batch_totals(url: str) -> tuple[float, float, float]:
    """(tokens, batches the front ends sent, batches the engines ran) so far, all engines together.
    An engine may join batches of several front ends into one device batch. A front end learns
    the engine's count from its replies: read it after a request, when the largest is current."""
    import httpx

    time.sleep(1.0)  # every front end has published its counts (they do every half second)
    totals = dict.fromkeys(("rose_engine_tokens_total", "rose_engine_batches_total", "rose_graph_replays_total",
                            "rose_eager_runs_total"), 0.0)
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in totals:
            totals[name] += float(line.rsplit(" ", 1)[1])
    return (totals["rose_engine_tokens_total"], totals["rose_engine_batches_total"],
            totals["rose_graph_replays_total"] + totals["rose_eager_runs_total"])


def ids_mean_batch_tokens(engine, seqs: list[np.ndarray]) -> float:
    from rose_embed.engine.contract.batch import cut_batches

    cuts = cut_batches([len(s) for s in seqs], engine.config.max_batch_tokens, engine.config.max_batch_seqs)
    return sum(len(s) for s in seqs) / len(cuts)


def render(args, engine, timings, cpu_times, server_cpu, names, num_tokens, num_texts, request_latencies,
           latencies, check, st_worst, errors, profile_lines, server_args, batch_sizes="", window_rates=(),
           window_shares=(), client_shares=(), transport_errors=0) -> str:
    median = {n: statistics.median(v) for n, v in timings.items()}
    http, eng = names[-1], names[-2]
    command = "python bench/load_gen.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    lines = [
        "# End-to-end load test",
        "",
        f"- command: `{command}`",
        f"- hardware: {hardware(engine.device)}",
        f"- date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- model: {engine.spec.name} on {engine.device} ({engine.dtype}); server flags: "
        + (f"`{' '.join(server_args)}`" if not args.url else f"those of the server at {args.url} (attached)"),
        f"- workload: {num_texts} texts ({args.num_texts} x {args.repeat}, {args.join} paragraph(s) each) of "
        f"{args.data.name}, {num_tokens} tokens; requests of 1-{args.max_request_texts} texts (seed {args.seed}), "
        f"formats {args.formats}; {args.clients} clients in {args.procs} process(es); median of {args.rounds} "
        "rounds, each round runs every path in turn on the same texts",
        f"- correctness: {check.checked} vectors received and checked against the engine's vector for their text, "
        f"**{check.mismatches} mismatches** (cosine < {check.min_cosine}); worst cosine {check.worst:.7f}"
        + (f"; sentence-transformers vs engine worst cosine {st_worst:.7f}" if st_worst is not None else "")
        + (f"; **{len(errors)} failed requests** ({transport_errors} transport errors: reset, broken pipe or "
           f"closed without a response), first: {errors[0]}" if errors else "; no failed requests, none at the "
           "transport level either"),
        f"- load generator: {args.procs} client process(es) of lean clients (bench/lib/lean_http.py, bodies encoded "
        f"beforehand, responses read as bytes), CPU share of a core each while sending: "
        + (f"max {max(client_shares):.1%}, mean {statistics.mean(client_shares):.1%}" if client_shares else "-")
        + " (a process near 100 % measures itself, not the server)",
        "",
        "| path | median s | texts/s | tokens/s | request p50 ms | request p99 ms | median CPU s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for n in names:
        p50 = f"{percentile_ms(request_latencies, 50):.1f}" if n == http else ""
        p99 = f"{percentile_ms(request_latencies, 99):.1f}" if n == http else ""
        lines.append(f"| {n} | {median[n]:.3f} | {num_texts / median[n]:.0f} | {num_tokens / median[n]:.0f} "
                     f"| {p50} | {p99} | {statistics.median(cpu_times[n]):.2f} |")
    if window_rates:
        rate = statistics.median(window_rates)
        lines.append(f"| {WINDOW}: every client busy | {num_tokens / rate:.3f} (at its rate) | "
                     f"{num_texts * rate / num_tokens:.0f} | {rate:.0f} |  |  |  |")
    # Ratios are taken per round (the paths ran back to back) and their median reported: on a
    # shared machine the load drifts between rounds far more than within one.
    lines.append("")
    if window_rates and len(window_rates) == len(timings[eng]):
        for baseline, label in ((eng, "engine alone (Engine.embed)"), (IDS_IN, "engine alone with ids in")):
            ratios = [w * t / num_tokens for w, t in zip(window_rates, timings[baseline])]
            lines.append(f"- **{WINDOW} / {label}: {statistics.median(ratios):.3f}x** (median of the per-round "
                         f"ratios {', '.join(f'{x:.2f}' for x in ratios)})")
        lines.append(f"- the steady window: from the moment every client had its first answer until the first "
                     f"client process sent its last request, counting only the requests answered inside it "
                     f"({statistics.median(window_shares):.0%} of the workload's tokens, median of the rounds); the "
                     "whole round below adds the filling up from idle and the drain, as clients run out of requests")
    elif len(window_rates) < len(timings[eng]):
        lines.append(f"- no steady window in {len(timings[eng]) - len(window_rates)} round(s): too short for one "
                     f"(it must last {STEADY_WINDOW_LATENCIES} median request latencies); use --repeat")
    per_round = [e / h for e, h in zip(timings[eng], timings[http])]
    lines += [f"- **HTTP, whole round / engine: {statistics.median(per_round):.3f}x** (median of the per-round ratios "
              f"{', '.join(f'{x:.2f}' for x in per_round)}; ratio of the medians {median[eng] / median[http]:.3f}x)"]
    ids_round = [e / h for e, h in zip(timings[IDS_IN], timings[http])]
    lines.append(f"- **HTTP, whole round / engine alone with ids in: {statistics.median(ids_round):.3f}x** "
                 "(median of the per-round "
                 f"ratios {', '.join(f'{x:.2f}' for x in ids_round)}): the device's own speed on these texts, "
                 "tokenizer and HTTP excluded")
    cpu_round = [e / h for e, h in zip(cpu_times[eng], cpu_times[http])]
    server_round = [e / h for e, h in zip(cpu_times[eng], server_cpu)]
    lines.append(f"- HTTP / engine by CPU time (engine CPU s / CPU s of server + client processes): "
                 f"**{statistics.median(cpu_round):.3f}x**; server process alone: {statistics.median(server_round):.3f}x "
                 f"(per round: {', '.join(f'{x:.2f}' for x in cpu_round)})")
    if names[0] != IDS_IN:
        st_round = [s / h for s, h in zip(timings[names[0]], timings[http])]
        lines.append(f"- **HTTP / sentence-transformers: {statistics.median(st_round):.2f}x** (median of the per-round "
                     f"ratios; ratio of the medians {median[names[0]] / median[http]:.2f}x)")
    if batch_sizes:
        lines.append(f"- batches: {batch_sizes}")
    if latencies:
        lines.append(f"- single short query (latency mode, {len(latencies)} queries of 4-16 tokens, one at a time): "
                     f"**p50 {percentile_ms(latencies, 50):.2f} ms, p99 {percentile_ms(latencies, 99):.2f} ms**")
    lines += ["", "CPU s per round: " + "; ".join(f"{n}: " + ", ".join(f"{x:.2f}" for x in v)
                                                for n, v in cpu_times.items()) + "; server process alone: "
              + ", ".join(f"{x:.2f}" for x in server_cpu)]
    lines += ["", "Rounds (s): " + "; ".join(f"{n}: " + ", ".join(f"{x:.3f}" for x in v) for n, v in timings.items())]
    if profile_lines:
        lines += ["", f"## Server profile (py-spy, last HTTP round; raw stacks: {args.py_spy})", "", *profile_lines]
    return "\n".join(lines) + "\n"



if __name__ == "__main__":
    sys.exit(main())
