"""The load generator's bulk pattern: a few clients, each sending large requests back to back.

    python bench/load_gen.py --pattern bulk --device cuda --model DIR --num-texts 12000 --out FILE

LangChain's `embed_documents` sends 1,000 texts a request, one request at a time; a
LlamaIndex ingestion does the same with 100. Here N clients (--bulk-clients; each its own
process, all started at one instant) each send requests of R texts (--request-texts) back
to back over one keep-alive connection of the lean client (bench/lib/lean_http.py): `base64`
vectors, bodies encoded beforehand, responses read as bytes. A request is a block of R
consecutive texts of the pool (--num-texts x --join paragraphs); client c starts at its own
block and walks the pool round and round.

Only requests answered inside the timed window count (it opens --warmup seconds after the
common start and lasts --window seconds); a request lost below HTTP (reset, broken pipe,
closed without a response) is a failure like a non-200 status. Per (R, N) the report gives
the counted requests' tokens/s, that rate over the engine alone with ids on the same pool in
the same round (`run_ids`: the pool tokenized beforehand, cut into full batches: the
device's own speed), how far one request more or less inside the window moves that ratio
(a window that holds few requests measures in coarse steps: make it longer), the p50
latency of one request beside the engine alone's time for one request's ids, and each
client process's CPU share of a core (one near 100 % measures itself, not the server).
Responses sampled over each client's run (a few, evenly spread) are decoded after the
window and every vector in them is checked against the engine's.

Results: bench/results/http/bulk-gpu-minilm.md and bulk-gpu-bert-base.md (`bench/gpu_session.sh bulk`;
the command in bench/load_gen.py's docstring and in each report).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import statistics
import sys
import time
from dataclasses import dataclass, field

import msgspec
import numpy as np

from bench.lib.lean_http import BlockingConnection, TransportError
from bench.lib.traffic import decode_body

PATH = "/v1/embeddings"
MAX_FAILURE_LINES = 5  # per client: the count is kept whole, the messages are examples


@dataclass
class BulkClientResult:
    pid: int
    started: float  # time.monotonic() (one clock for all processes on Linux)
    stopped: float
    cpu_seconds: float  # this process's CPU time while sending
    answered: list[tuple[int, float, float]]  # (block, sent, answered) per 200
    timings: list[dict[str, float]]  # per 200, the server's phases (ms) from its x-<phase>-time-ms headers
    failures: int  # non-200 statuses, transport errors and malformed replies
    transport_errors: int
    failure_lines: list[str]
    sampled: list[tuple[int, np.ndarray]] = field(default_factory=list)  # (block, [R, dim] float32)

    @property
    def cpu_share(self) -> float:
        return self.cpu_seconds / max(self.stopped - self.started, 1e-9)


class EvenSample:
    """At most 2 x cap items offered one by one, spread evenly over all offered: every stride-th
    is kept, and the stride doubles (every other kept one dropped) whenever 2 x cap are held."""

    def __init__(self, cap: int):
        self.cap, self.stride, self.seen, self.kept = max(1, cap), 1, 0, []

    def offer(self, item) -> None:
        if self.seen % self.stride == 0:
            self.kept.append(item)
            if len(self.kept) >= 2 * self.cap:
                self.kept, self.stride = self.kept[::2], 2 * self.stride
        self.seen += 1


def encode_blocks(texts: list[str], request_texts: int, model: str | None) -> list[bytes]:
    """The body of each block of request_texts consecutive texts (the last partial block dropped)."""
    encoder = msgspec.json.Encoder()
    bodies = []
    for lo in range(0, len(texts) - request_texts + 1, request_texts):
        payload = {"input": texts[lo : lo + request_texts], "encoding_format": "base64"}
        if model:
            payload["model"] = model
        bodies.append(encoder.encode(payload))
    return bodies


def run_bulk_client(url: str, bodies: list[bytes], first_block: int, start_at: float, stop_at: float,
                    sample_cap: int = 2) -> BulkClientResult:
    """One client process: from start_at, send block after block, each once the previous one is
    answered, until stop_at; then decode the sampled responses (outside the timing)."""
    connection = BlockingConnection(url)
    answered, timings, failure_lines, sample = [], [], [], EvenSample(sample_cap)
    failures = transport_errors = 0

    def fail(line: str) -> None:
        nonlocal failures
        failures += 1
        if len(failure_lines) < MAX_FAILURE_LINES:
            failure_lines.append(line)

    delay = start_at - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    cpu, started = time.process_time(), time.monotonic()
    block = first_block % len(bodies)
    while (sent := time.monotonic()) < stop_at:
        try:
            status, body = connection.post(PATH, bodies[block])
        except TransportError as exc:
            transport_errors += 1
            fail(f"transport: {exc}")
            time.sleep(0.01)  # a server that refuses at once must not spin this loop
            continue
        if status == 200:
            answered.append((block, sent, time.monotonic()))
            timings.append(connection.timings)
            sample.offer((block, body))
        else:
            fail(f"{status}: {body[:200].decode(errors='replace')}")
        block = (block + 1) % len(bodies)
    stopped, cpu = time.monotonic(), time.process_time() - cpu
    connection.close()
    sampled = []
    for block, body in sample.kept:
        items = decode_body(body)
        if [i for i, _ in items] != list(range(len(items))) or not items:
            fail(f"block {block}: indices out of order or missing")
            continue
        sampled.append((block, np.stack([v for _, v in items])))
    return BulkClientResult(os.getpid(), started, stopped, cpu, answered, timings, failures, transport_errors,
                            failure_lines, sampled)


@dataclass
class Measurement:
    """One (request size, number of clients) in one round."""

    request_texts: int
    num_clients: int
    tokens_per_s: float  # of the requests answered inside the window
    ratio: float  # tokens_per_s over the round's engine alone with ids
    counted: int  # requests answered inside the window
    latencies: list[float]  # seconds, of the counted requests
    phases: list[dict[str, float]]  # the server's phases (ms) of the counted requests
    failures: int
    transport_errors: int
    failure_lines: list[str]
    cpu_shares: list[float]  # one per client process
    distinct_processes: bool
    start_spread: float  # seconds between the first and the last client's start


def measure(pool, url: str, bodies: list[bytes], request_texts: int, block_tokens: list[int], num_clients: int,
            warmup: float, window: float, engine_rate: float, check, reference: np.ndarray,
            profiler=contextlib.nullcontext()) -> Measurement:
    """num_clients processes of the pool start at one instant and send until the window closes;
    reference[i]: the engine's vector of the pool's text i. `profiler` is entered for the run."""
    start_at = time.monotonic() + 1.0  # time for every process to receive its task and bodies
    opens, closes = start_at + warmup, start_at + warmup + window
    stride = max(1, len(bodies) // num_clients)
    with profiler:
        futures = [pool.submit(run_bulk_client, url, bodies, c * stride, start_at, closes)
                   for c in range(num_clients)]
        results = [f.result() for f in futures]
    counted = [(block, at - sent, phases) for r in results
               for (block, sent, at), phases in zip(r.answered, r.timings) if opens < at <= closes]
    rate = sum(block_tokens[block] for block, _, _ in counted) / window
    for r in results:
        for block, vectors in r.sampled:
            check.add(vectors, reference[block * request_texts : (block + 1) * request_texts])
    return Measurement(request_texts, num_clients, rate, rate / engine_rate, len(counted),
                       [seconds for _, seconds, _ in counted], [phases for _, _, phases in counted],
                       sum(r.failures for r in results),
                       sum(r.transport_errors for r in results), [x for r in results for x in r.failure_lines],
                       [r.cpu_share for r in results], len({r.pid for r in results}) == num_clients,
                       max(r.started for r in results) - min(r.started for r in results))


SERVER_PHASES = ("preparation", "queue", "inference", "answer", "tokenization", "total")


def _median_of(phases: list[dict[str, float]], name: str) -> str:
    values = [p[name] for p in phases if name in p]
    return f"{statistics.median(values):.1f}" if values else "-"


def time_ids(engine, seqs: list[np.ndarray], repeats: int = 1) -> float:
    """Median seconds of the engine alone on these ids (bench/embed_pipeline.py's run_ids)."""
    from bench.embed_pipeline import run_ids

    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        run_ids(engine, seqs)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def run_bulk(args, engine, min_cosine: float, server_args: list[str]) -> int:
    """load_gen's --pattern bulk: every (request size, clients) measured per round, each round
    after the engine alone on the whole pool; exits 1 on a failed request or a wrong vector."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from bench.lib.common import ServerProcess, VectorCheck, build_texts, publish
    from bench.lib.profile_summary import PySpy, summarize

    sizes = [int(x) for x in args.request_texts.split(",")]
    client_counts = [int(x) for x in args.bulk_clients.split(",")]
    texts = build_texts(args.data, args.num_texts, args.join) * args.repeat
    if len(texts) < max(sizes):
        sys.exit(f"load_gen: --pattern bulk needs at least {max(sizes)} texts (--num-texts x --repeat)")
    seqs = engine.tokenize(texts)
    reference = engine.embed(texts)
    per_size = {}
    for size in sizes:
        num_blocks = len(texts) // size
        tokens = [sum(len(ids) for ids in seqs[b * size : (b + 1) * size]) for b in range(num_blocks)]
        one_request_ms = 1000 * time_ids(engine, seqs[:size], repeats=5)
        per_size[size] = (encode_blocks(texts, size, None), tokens, one_request_ms)
    num_tokens = sum(len(ids) for ids in seqs)
    check = VectorCheck(min_cosine)
    engine_rates: list[float] = []
    rows: list[Measurement] = []
    profile_lines: list[str] = []
    server = None if args.url else ServerProcess(*server_args)
    url = args.url or server.url
    try:
        with ProcessPoolExecutor(max(client_counts), mp_context=multiprocessing.get_context("spawn")) as pool:
            list(pool.map(time.sleep, [0.1] * max(client_counts)))  # every process started before any timing
            for size, (bodies, _, _) in per_size.items():  # the server's first requests of each size
                warm = BlockingConnection(url)
                for body in bodies[:2]:
                    warm.post(PATH, body)
                warm.close()
            for r in range(args.rounds):
                engine_rates.append(num_tokens / time_ids(engine, seqs))
                for size, (bodies, tokens, _) in per_size.items():
                    for n in client_counts:
                        # py-spy over the fewest clients of the first size in the last round: where one
                        # client's large requests spend the server's time.
                        profiled = (args.py_spy is not None and server is not None and r == args.rounds - 1
                                    and size == sizes[0] and n == min(client_counts))
                        profiler = PySpy(server.proc.pid, args.py_spy) if profiled else contextlib.nullcontext()
                        rows.append(measure(pool, url, bodies, size, tokens, n, args.warmup, args.window,
                                            engine_rates[-1], check, reference, profiler))
                        if profiled:
                            profile_lines = [f"{size} texts a request x {n} client(s), last round; raw stacks: "
                                             f"{args.py_spy}", "", *summarize(args.py_spy)]
                        print(f"round {r}: {size} texts x {n} clients: {rows[-1].tokens_per_s:,.0f} tok/s "
                              f"({rows[-1].ratio:.2f}x), {rows[-1].failures} failures", flush=True)
    finally:
        if server is not None:
            server.stop()
    report = render(args, engine, server_args, rows, engine_rates, per_size, num_tokens, len(texts), check)
    if profile_lines:
        report += "\n## Server profile (py-spy)\n\n" + "\n".join(profile_lines) + "\n"
    publish(report, args.out)
    return 1 if check.mismatches or any(m.failures for m in rows) or not check.checked else 0


def render(args, engine, server_args, rows: list[Measurement], engine_rates: list[float], per_size: dict,
           num_tokens: int, num_texts: int, check) -> str:
    from bench.lib.common import hardware

    command = "python bench/load_gen.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    failures = sum(m.failures for m in rows)
    lines = [
        "# Bulk load: large requests back to back",
        "",
        f"- command: `{command}`",
        f"- hardware: {hardware(engine.device)}",
        f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- model: {engine.spec.name} on {engine.device} ({engine.dtype}); server flags: "
        + (f"`{' '.join(server_args)}`" if not args.url else f"those of the server at {args.url} (attached)"),
        f"- workload: a pool of {num_texts} texts ({args.num_texts} x {args.repeat}, {args.join} paragraph(s) each) "
        f"of {args.data.name}, {num_tokens} tokens; each request a block of consecutive texts of the pool, "
        "`base64`, bodies encoded beforehand; each client its own process, all started at one instant, "
        f"sending back to back on one keep-alive connection; a window of {args.window:g} s opening "
        f"{args.warmup:g} s after the start counts the requests answered inside it; {args.rounds} round(s)",
        "- engine alone with ids in (the pool tokenized beforehand, cut into full batches, no HTTP), each round: "
        + ", ".join(f"{x:,.0f}" for x in engine_rates) + " tokens/s",
        f"- correctness: {check.checked} vectors of sampled responses checked against the engine's, "
        f"**{check.mismatches} mismatches** (cosine < {check.min_cosine}); worst cosine {check.worst:.7f}; "
        + (f"**{failures} failed requests**" if failures else "no failed requests, none at the transport level"),
        "",
        "| texts a request | clients | tokens/s | x engine alone | one request more or less, x "
        "| requests counted | request p50 ms | engine alone, one request's ids, ms | failed (transport) "
        "| client CPU, % of a core (max) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for size, (_, _, one_request_ms) in per_size.items():
        for n in dict.fromkeys(m.num_clients for m in rows if m.request_texts == size):
            ms = [m for m in rows if m.request_texts == size and m.num_clients == n]
            latencies = [x for m in ms for x in m.latencies]
            p50 = f"{1000 * statistics.median(latencies):.1f}" if latencies else "-"
            shares = [x for m in ms for x in m.cpu_shares]
            # Only whole requests count: with few inside the window, the ratio moves in coarse steps.
            step = [m.ratio / m.counted for m in ms if m.counted]
            # Two significant digits: a window of many requests moves the ratio by less than 0.01.
            step_text = f"{statistics.median(step):.2g}" if step else "-"
            lines.append(f"| {size} | {n} | {statistics.median(m.tokens_per_s for m in ms):,.0f} "
                         f"| **{statistics.median(m.ratio for m in ms):.2f}x** | {step_text} "
                         f"| {sum(m.counted for m in ms)} | {p50} "
                         f"| {one_request_ms:.1f} | {sum(m.failures for m in ms)} "
                         f"({sum(m.transport_errors for m in ms)}) | {max(shares):.1%} |")
    lines += ["", "Where a request's time went, as the server timed it (medians of the counted requests' "
              "x-<phase>-time-ms headers, ms): preparation (arrival to the first piece handed to the engines), "
              "queue (to the engine starting on it), inference (to the last vectors on the host), answer (to the "
              "response's headers); tokenization overlaps them.", "",
              "| texts a request | clients | " + " | ".join(SERVER_PHASES) + " |",
              "| ---: | ---: |" + " ---: |" * len(SERVER_PHASES)]
    for size in per_size:
        for n in dict.fromkeys(m.num_clients for m in rows if m.request_texts == size):
            phases = [p for m in rows if m.request_texts == size and m.num_clients == n for p in m.phases]
            lines.append(f"| {size} | {n} | " + " | ".join(_median_of(phases, name) for name in SERVER_PHASES) + " |")
    lines += ["", "Medians over the rounds; the ratio is taken per round against that round's engine alone. "
              "Per round (tokens/s, ratio): "
              + "; ".join(f"{m.request_texts}x{m.num_clients}: {m.tokens_per_s:,.0f} ({m.ratio:.2f}x)" for m in rows)]
    spread = max(m.start_spread for m in rows) if rows else 0.0
    lines.append(f"- client processes: one per client in every measurement: "
                 f"{'yes' if all(m.distinct_processes for m in rows) else '**no**'}; their starts within "
                 f"{1000 * spread:.1f} ms of one another")
    examples = [x for m in rows for x in m.failure_lines][:MAX_FAILURE_LINES]
    if examples:
        lines += ["", "Failed requests, first ones:", *[f"- {x}" for x in examples]]
    return "\n".join(lines) + "\n"
