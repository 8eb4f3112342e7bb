"""The load generator's mixed pattern: a search box's queries beside an indexing job, on one server.

    python bench/load_gen.py --pattern mixed --device cpu --bulk-clients 1,4 --out bench/results/http/mixed-cpu-minilm.md

The way a server is used in production: Q query connections (--query-clients, default 8) each
send one short text (4 to 16 tokens), wait for its answer, wait --query-gap (20 ms) and send
the next, while B bulk clients (--bulk-clients, each count measured on its own) send requests
of --request-texts (1,000: LangChain's `embed_documents`) back to back. Every client is a
process of its own, all started at one instant; only what is answered inside a window of
--window seconds, opening --warmup seconds after the start, counts; a request lost below HTTP
counts as failed; each client process reports its CPU share of a core. A 429 is retried after
its Retry-After, as the OpenAI SDK retries it. Bodies are `base64` (what the OpenAI SDK and
LangChain ask for) and encoded beforehand.

Each server is started once and measured, in one run: the queries alone, then per B the bulk
clients alone and both together. The report gives the queries' p50/p90/p99 with the bulk
clients over alone, and the bulk clients' tokens/s with the queries over alone: the tokens the
engines computed inside the window (rose_engine_tokens_total, read from /metrics as the window
opens and closes) less the answered queries' own. Fair scheduling advances every bulk request
together, so few finish inside a window and whole answered requests measure in coarse steps:
their texts/s is given beside it. The servers: the
default flags, then `--scheduling fcfs` (strict arrival order, no express lane, the batch
budget still chosen at warm-up), and on the CPU also with `--max-batch-tokens 16384` (the
server as it was before fair scheduling: its batches that large), as the baselines. With
--overload-clients N, N bulk clients then send for --overload-seconds against the default
server: the responses by status, how fast each 429 came, and the accepted requests' p50 and
p99. Sampled responses of every kind are decoded after their window and checked against the
engine's vectors.
"""

from __future__ import annotations

import os
import shlex
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import numpy as np

from bench.lib.bulk import EvenSample, encode_blocks
from bench.lib.lean_http import BlockingConnection, TransportError
from bench.lib.traffic import decode_body

PATH = "/v1/embeddings"
MAX_FAILURE_LINES = 5
CLIENT_TIMEOUT_S = 300.0  # past the server's own request timeout: a 504 is counted, not a client timeout


@dataclass
class ClientResult:
    pid: int
    started: float
    stopped: float
    cpu_seconds: float
    exchanges: list[tuple[int, int, float, float]]  # (block, status, sent, answered), transport errors as status 0
    timings: list[dict[str, float]]  # per exchange, the server's phases (ms) from its x-<phase>-time-ms headers
    failure_lines: list[str]
    sampled: list[tuple[int, np.ndarray]] = field(default_factory=list)  # (block, [texts, dim]) of 200s

    @property
    def cpu_share(self) -> float:
        return self.cpu_seconds / max(self.stopped - self.started, 1e-9)


def run_client(url: str, bodies: list[bytes], first_block: int, start_at: float, stop_at: float, gap: float,
               sample_cap: int = 2) -> ClientResult:
    """One client process: from start_at, send block after block, each once the last is answered and
    `gap` seconds have passed, until stop_at; a 429 waits its Retry-After first."""
    connection = BlockingConnection(url, timeout=CLIENT_TIMEOUT_S)
    exchanges, timings, failure_lines, sample = [], [], [], EvenSample(sample_cap)
    delay = start_at - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    cpu, started = time.process_time(), time.monotonic()
    block = first_block % len(bodies)
    while (sent := time.monotonic()) < stop_at:
        try:
            status, body = connection.post(PATH, bodies[block])
        except TransportError as exc:
            exchanges.append((block, 0, sent, time.monotonic()))
            timings.append({})
            if len(failure_lines) < MAX_FAILURE_LINES:
                failure_lines.append(f"transport: {exc}")
            time.sleep(0.05)
            continue
        exchanges.append((block, status, sent, time.monotonic()))
        timings.append(connection.timings)
        if status == 200:
            sample.offer((block, body))
            block = (block + 1) % len(bodies)
        elif status == 429:
            time.sleep(min(connection.retry_after or 1.0, max(0.0, stop_at - time.monotonic())))
            continue
        elif len(failure_lines) < MAX_FAILURE_LINES:
            failure_lines.append(f"{status}: {body[:200].decode(errors='replace')}")
        if gap:
            time.sleep(gap)
    stopped, cpu = time.monotonic(), time.process_time() - cpu
    connection.close()
    sampled = [(b, np.stack([v for _, v in decode_body(body)])) for b, body in sample.kept]
    return ClientResult(os.getpid(), started, stopped, cpu, exchanges, timings, failure_lines, sampled)


@dataclass
class Phase:
    """One measurement: some query clients and some bulk clients over one window."""

    num_queries: int
    num_bulk: int
    window: float
    query_latencies: list[float]  # seconds, queries answered 200 inside the window
    query_phases: list[dict[str, float]]  # ... and the server's phases of each (ms)
    bulk_texts: int  # texts of the bulk requests answered 200 inside the window
    bulk_tokens: int
    bulk_latencies: list[float]
    statuses: dict[int, int]  # every response inside the window, by status (0: lost below HTTP)
    refusal_latencies: list[float]  # seconds, of the 429s inside the window, as the client saw them
    refusal_server_latencies: list[float]  # ... and as the server timed them (x-total-time-ms)
    computed_tokens: float  # by the engines inside the window, the queries' own included
    query_tokens: int  # of the queries answered inside the window
    failure_lines: list[str]
    cpu_shares: list[float]
    start_spread: float
    server_cores: tuple[float, float] = (float("nan"), float("nan"))  # CPU over the window: engines, the rest

    @property
    def bulk_texts_per_s(self) -> float:
        return self.bulk_texts / self.window

    @property
    def bulk_tokens_per_s(self) -> float:
        """What the engines computed for the bulk clients inside the window, per second."""
        return (self.computed_tokens - self.query_tokens) / self.window

    @property
    def failures(self) -> int:
        return sum(n for status, n in self.statuses.items() if status not in (200, 429))


def metric(url: str, name: str) -> float:
    """One unlabelled series of the server's /metrics."""
    import httpx

    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise RuntimeError(f"{url}/metrics has no {name}")


def computed_tokens(url: str) -> float:
    """The tokens every engine has computed so far."""
    return metric(url, "rose_tokens_total")


class ServerCpu:
    """CPU seconds so far of a server's engine processes and of the rest of it (supervisor, front ends)."""

    def __init__(self, url: str, server_pid: int):
        import httpx

        self.server_pid = server_pid
        self.engine_pids = [e["pid"] for e in httpx.get(url + "/health", timeout=10).json().get("engines", [])]

    def __call__(self) -> tuple[float, float]:
        from bench.lib.common import process_cpu_seconds

        engines = sum(process_cpu_seconds(pid) for pid in self.engine_pids)
        return engines, process_cpu_seconds(self.server_pid) - engines


def run_phase(pool, url: str, query_bodies: list[bytes], query_tokens: list[int], bulk_bodies: list[bytes],
              bulk_tokens: list[int], request_texts: int, num_queries: int, num_bulk: int, warmup: float,
              window: float, gap: float, checks: list, server_cpu: ServerCpu | None = None) -> Phase:
    """All the clients start at one instant; what is answered inside the window counts.
    `checks`: (check, query reference, bulk reference) that sampled vectors are compared with;
    `server_cpu`: the server's CPU, read as the window opens and closes."""
    start_at = time.monotonic() + 1.0
    opens, closes = start_at + warmup, start_at + warmup + window
    futures = [("query", pool.submit(run_client, url, query_bodies, c * 37, start_at, closes, gap))
               for c in range(num_queries)]
    stride = max(1, len(bulk_bodies) // max(num_bulk, 1))
    futures += [("bulk", pool.submit(run_client, url, bulk_bodies, c * stride, start_at, closes, 0.0))
                for c in range(num_bulk)]
    time.sleep(max(0.0, opens - time.monotonic()))
    at_open, cpu_at_open = computed_tokens(url), server_cpu() if server_cpu else (0.0, 0.0)
    time.sleep(max(0.0, closes - time.monotonic()))
    computed = computed_tokens(url) - at_open
    cores = (tuple((after - before) / window for after, before in zip(server_cpu(), cpu_at_open)) if server_cpu
             else (float("nan"), float("nan")))
    results = [(kind, f.result()) for kind, f in futures]
    check, query_reference, bulk_reference = checks
    query_latencies, query_phases, bulk_latencies, statuses, refusals, lines = [], [], [], {}, [], []
    server_refusals = []
    texts = tokens = answered_query_tokens = 0
    for kind, result in results:
        lines += result.failure_lines
        for (block, status, sent, answered), phases in zip(result.exchanges, result.timings):
            if not opens < answered <= closes:
                continue
            statuses[status] = statuses.get(status, 0) + 1
            if status == 429:
                refusals.append(answered - sent)
                if "total" in phases:
                    server_refusals.append(phases["total"] / 1000)
            elif status == 200 and kind == "query":
                query_latencies.append(answered - sent)
                query_phases.append(phases)
                answered_query_tokens += query_tokens[block]
            elif status == 200:
                bulk_latencies.append(answered - sent)
                texts += request_texts
                tokens += bulk_tokens[block]
        for block, vectors in result.sampled:
            if kind == "query":
                check.add(vectors, query_reference[block : block + 1])
            else:
                check.add(vectors, bulk_reference[block * request_texts : (block + 1) * request_texts])
    starts = [r.started for _, r in results]
    return Phase(num_queries, num_bulk, window, query_latencies, query_phases, texts, tokens, bulk_latencies, statuses,
                 refusals, server_refusals,
                 computed, answered_query_tokens, lines, [r.cpu_share for _, r in results], max(starts) - min(starts),
                 cores)


def query_bodies(queries: list[str]) -> list[bytes]:
    encoder = msgspec.json.Encoder()
    return [encoder.encode({"input": text, "encoding_format": "base64"}) for text in queries]


# The budget of every batch before the CPU's was chosen at warm-up.
BEFORE_BATCH_TOKENS = 16384

QUERY_PHASES = ("preparation", "queue", "inference", "answer", "total")


def _commit() -> str:
    """$ROSE_EMBED_COMMIT where set (a device run's copy has the files, and perhaps a stale git directory),
    else the tree's commit (bench/lib/head_report.py's rule)."""
    from bench.lib.head_report import commit

    return commit()


def _median_phase(phases: list[dict[str, float]], name: str) -> str:
    values = [p[name] for p in phases if name in p]
    return f"{statistics.median(values):.1f}" if values else "-"


def percentile_ms(values: list[float], q: float) -> float:
    return 1000 * float(np.percentile(values, q)) if values else float("nan")


def run_mixed(args, engine, min_cosine: float, base_flags: list[str]) -> int:
    """load_gen's --pattern mixed; exits 1 on a failed request (other than a 429) or a wrong vector."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from bench.lib.common import ServerProcess, VectorCheck, build_texts, publish
    from bench.load_gen import short_queries

    request_texts = int(args.request_texts.split(",")[0])
    bulk_counts = [int(x) for x in args.bulk_clients.split(",")]
    texts = build_texts(args.data, args.num_texts, args.join) * args.repeat
    if len(texts) < request_texts:
        sys.exit(f"load_gen: --pattern mixed needs at least {request_texts} texts (--num-texts x --repeat)")
    queries = short_queries(args.data, engine, 400)
    query_tokens = [len(ids) for ids in engine.tokenize(queries)]
    seqs = engine.tokenize(texts)
    bulk = encode_blocks(texts, request_texts, None)
    bulk_tokens = [sum(len(s) for s in seqs[b * request_texts:(b + 1) * request_texts]) for b in range(len(bulk))]
    check = VectorCheck(min_cosine)
    checks = (check, engine.embed(queries), engine.embed(texts))
    bodies = query_bodies(queries)
    budget: dict[str, int] = {}  # per server, the batch budget its warm-up chose
    warm_up_lines: dict[str, list[str]] = {}  # ... and what its log says of the choice
    fcfs = [*base_flags, "--scheduling", "fcfs"]
    servers = [("default flags", base_flags), ("--scheduling fcfs", fcfs)]
    if engine.device.type == "cpu":  # a GPU's default budget is that large already
        servers.append((f"--scheduling fcfs --max-batch-tokens {BEFORE_BATCH_TOKENS}",
                        [*fcfs, "--max-batch-tokens", str(BEFORE_BATCH_TOKENS)]))
    servers = servers[:1] if args.no_baseline else servers
    num_procs = max(args.query_clients + max(bulk_counts), args.overload_clients)
    results: dict[str, list[list[Phase]]] = {}  # per server, per round: queries alone, then (bulk alone, both) per B
    overload: Phase | None = None
    with ProcessPoolExecutor(num_procs, mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(time.sleep, [0.1] * num_procs))  # every process started before any timing

        server_cpu: ServerCpu | None = None  # the server being measured's

        def phase(url: str, num_queries: int, num_bulk: int, window: float, warmup: float) -> Phase:
            measured = run_phase(pool, url, bodies, query_tokens, bulk, bulk_tokens, request_texts, num_queries,
                                 num_bulk, warmup, window, args.query_gap, checks, server_cpu)
            print(f"  {num_queries} query + {num_bulk} bulk clients: query p50 "
                  f"{percentile_ms(measured.query_latencies, 50):.1f} ms, p99 "
                  f"{percentile_ms(measured.query_latencies, 99):.1f} ms; bulk {measured.bulk_tokens_per_s:,.0f} "
                  f"tokens/s computed, {measured.bulk_texts_per_s:.1f} texts/s answered; statuses "
                  f"{measured.statuses}", flush=True)
            return measured

        for name, flags in servers:
            print(f"server: {name}", flush=True)
            log_path = Path(tempfile.mkdtemp()) / "server.log"
            server = ServerProcess(*flags, log_path=log_path)
            try:
                warm = BlockingConnection(server.url, timeout=CLIENT_TIMEOUT_S)
                for body in [*bulk[:1], *bodies[:20]]:  # the first requests of each shape, outside the timing
                    warm.post(PATH, body)
                warm.close()
                budget[name] = int(metric(server.url, "rose_batch_budget_tokens"))
                warm_up_lines[name] = [line.split("rose_embed.engine: ", 1)[-1] for line in
                                       log_path.read_text(errors="replace").splitlines()
                                       if "batches of at most" in line or "at each budget timed" in line]
                server_cpu = ServerCpu(server.url, server.proc.pid)
                results[name] = []
                for _ in range(args.rounds):  # a shared machine's speed drifts: ratios are taken within a round
                    rows = [phase(server.url, args.query_clients, 0, args.window, args.warmup)]
                    for count in bulk_counts:
                        rows.append(phase(server.url, 0, count, args.window, args.warmup))
                        rows.append(phase(server.url, args.query_clients, count, args.window, args.warmup))
                    results[name].append(rows)
                if args.overload_clients and name == servers[0][0]:
                    print(f"overload: {args.overload_clients} bulk clients for {args.overload_seconds:g} s", flush=True)
                    overload = phase(server.url, 0, args.overload_clients, args.overload_seconds, 0.0)
            finally:
                server.stop()
    batch_seconds = None
    if engine.device.type == "cuda" and budget:  # what a query may wait for beside bulk work: one full batch
        from rose_embed.engine.rose.batch_budget import measured_speed

        batch_seconds = measured_speed(lambda seqs: engine.execute(seqs).wait(),
                                       budget[servers[0][0]]).batch_seconds
    publish(render(args, engine, base_flags, results, overload, check, len(texts), request_texts, bulk_tokens,
                   budget, batch_seconds, warm_up_lines), args.out)
    failed = (any(p.failures for rounds in results.values() for rows in rounds for p in rows)
              or (overload and overload.failures))
    return 1 if failed or check.mismatches or not check.checked else 0


def render(args, engine, base_flags: list[str], results: dict[str, list[list[Phase]]], overload: Phase | None, check,
           num_texts: int, request_texts: int, bulk_tokens: list[int], budget: dict[str, int],
           batch_seconds: float | None, warm_up_lines: dict[str, list[str]]) -> str:
    from bench.lib.common import hardware

    command = "python bench/load_gen.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    lines = [
        "# Mixed load: search queries beside an indexing job",
        "",
        f"- command: `{command}`",
        f"- hardware: {hardware(engine.device)}",
        f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- commit: {_commit()}",
        f"- model: {engine.spec.name}; server flags: `{' '.join(base_flags) or '(none)'}`, then the same with "
        "`--scheduling fcfs` (strict arrival order, no express lane, the batch budget still chosen at warm-up)"
        + (f" and with `--scheduling fcfs --max-batch-tokens {BEFORE_BATCH_TOKENS}` (the server before fair "
           "scheduling)" if engine.device.type == "cpu" else ""),
        f"- workload: {args.query_clients} query clients, each sending one text of 4 to 16 tokens, waiting for "
        f"its answer and {1000 * args.query_gap:g} ms, then the next; bulk clients sending requests of "
        f"{request_texts} texts ({statistics.mean(bulk_tokens):,.0f} tokens on average, a pool of {num_texts} "
        f"texts of {args.data.name}) back to back; `base64`; every client its own process, all started at one "
        f"instant; a window of {args.window:g} s opening {args.warmup:g} s after the start counts what is "
        "answered inside it; a 429 is retried after its Retry-After",
        f"- correctness: {check.checked} vectors of sampled responses checked against the engine's, "
        f"**{check.mismatches} mismatches** (cosine < {check.min_cosine}); worst cosine {check.worst:.7f}",
        "- batch budget per server, as its warm-up chose it: "
        + "; ".join(f"{name}: {tokens} tokens" for name, tokens in budget.items()),
        *[f"- warm-up's log, {name}: " + " / ".join(lines) for name, lines in warm_up_lines.items() if lines],
        *([f"- one full batch of the default flags' budget ({budget[next(iter(budget))]} tokens of 32-token texts) "
           f"takes {1000 * batch_seconds:.1f} ms on the device (the engine alone, in this run)"]
          if batch_seconds else []),
        "",
        "| server | bulk clients | query p50 ms | p90 | p99 | p50 x alone | p99 x alone | bulk tokens/s computed | "
        "x alone | ceiling | bulk texts/s answered (alone) | bulk request p50 s | failed | client CPU max |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    per_round = []
    for name, rounds in results.items():
        alone = [p for rows in rounds for p in rows[:1]]
        pooled = [x for p in alone for x in p.query_latencies]
        lines.append(f"| {name} | 0 | {percentile_ms(pooled, 50):.1f} | {percentile_ms(pooled, 90):.1f} | "
                     f"{percentile_ms(pooled, 99):.1f} | 1.00x | 1.00x | - | - | - | - | - | "
                     f"{sum(p.failures for p in alone)} | {max(s for p in alone for s in p.cpu_shares):.1%} |")
        for k in range(len(rounds[0]) // 2):
            pairs = [(rows[0], rows[1 + 2 * k], rows[2 + 2 * k]) for rows in rounds]
            q = [x for _, _, mixed in pairs for x in mixed.query_latencies]
            p50s = [percentile_ms(m.query_latencies, 50) / percentile_ms(a.query_latencies, 50) for a, _, m in pairs]
            p99s = [percentile_ms(m.query_latencies, 99) / percentile_ms(a.query_latencies, 99) for a, _, m in pairs]
            ratios = [m.bulk_tokens_per_s / b.bulk_tokens_per_s for _, b, m in pairs]
            ceilings = [1 - m.query_tokens / m.window / b.bulk_tokens_per_s for _, b, m in pairs]
            bulk_latencies = [x for _, _, m in pairs for x in m.bulk_latencies]
            mixed = pairs[0][2]
            per_round.append(f"{name}, {mixed.num_bulk} bulk: query p50 "
                             + ", ".join(f"{x:.2f}x" for x in p50s) + "; p99 " + ", ".join(f"{x:.2f}x" for x in p99s)
                             + "; bulk " + ", ".join(f"{x:.2f}x" for x in ratios))
            lines.append(
                f"| {name} | {mixed.num_bulk} | {percentile_ms(q, 50):.1f} | {percentile_ms(q, 90):.1f} | "
                f"{percentile_ms(q, 99):.1f} | **{statistics.median(p50s):.2f}x** | **{statistics.median(p99s):.2f}x** "
                f"| {statistics.median(m.bulk_tokens_per_s for _, _, m in pairs):,.0f} (alone "
                f"{statistics.median(b.bulk_tokens_per_s for _, b, _ in pairs):,.0f}) | "
                f"**{statistics.median(ratios):.2f}x** | {statistics.median(ceilings):.2f}x | "
                f"{statistics.median(m.bulk_texts_per_s for _, _, m in pairs):.1f} "
                f"({statistics.median(b.bulk_texts_per_s for _, b, _ in pairs):.1f}) | "
                f"{statistics.median(bulk_latencies) if bulk_latencies else float('nan'):.1f} | "
                f"{sum(m.failures + b.failures for _, b, m in pairs)} | "
                f"{max(s for _, b, m in pairs for s in m.cpu_shares + b.cpu_shares):.1%} |")
    lines += ["", f"Latencies pooled over the {len(next(iter(results.values())))} round(s); each ratio is taken "
              "within a round (the queries alone, the bulk clients alone and both together, one after the "
              "other), and its median given. Per round: " + "; ".join(per_round) + "."]
    lines += ["", "Where a query's time went, as the server timed it (medians of x-<phase>-time-ms, ms): "
              "preparation (arrival to its piece handed to the engines), queue (to the batch that holds it "
              "starting), inference (to its vector on the host), answer (to the response's headers); the "
              "rest of the client's latency is HTTP and the client.", "",
              "| server | bulk clients | " + " | ".join(QUERY_PHASES) + " | client latency |",
              "| --- | ---: |" + " ---: |" * (len(QUERY_PHASES) + 1)]
    for name, rounds in results.items():
        for k in range(0, len(rounds[0]), 2):  # the queries alone, then with each count of bulk clients
            phases = [rows[k] for rows in rounds]
            timed = [t for p in phases for t in p.query_phases]
            cells = [_median_phase(timed, p) for p in QUERY_PHASES]
            lines.append(f"| {name} | {phases[0].num_bulk} | " + " | ".join(cells)
                         + f" | {percentile_ms([x for p in phases for x in p.query_latencies], 50):.1f} |")
    lines += ["", f"The server's CPU over each window, in cores of the machine's {os.cpu_count()}: its engine "
              "processes, and the rest of it (front ends: HTTP, JSON, tokenizing; the supervisor). The ceiling "
              "above counts the queries' engine tokens only; their front-end work takes CPU from the same cores.",
              "", "| server | query clients | bulk clients | engines | the rest | queries/s |",
              "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for name, rounds in results.items():
        for k in range(len(rounds[0])):
            phases = [rows[k] for rows in rounds]
            lines.append(f"| {name} | {phases[0].num_queries} | {phases[0].num_bulk} | "
                         f"{statistics.median(p.server_cores[0] for p in phases):.2f} | "
                         f"{statistics.median(p.server_cores[1] for p in phases):.2f} | "
                         f"{statistics.median(len(p.query_latencies) / p.window for p in phases):.0f} |")
    lines += ["", "Bulk tokens/s computed: the engines' tokens inside the window less the answered queries' "
              "own. The ceiling is what the bulk clients would keep if the queries cost the engines their own "
              "tokens and nothing more: 1 less the queries' tokens per second over the bulk clients' alone (the "
              "faster the queries are answered, the more of them the query clients send). Bulk texts/s "
              "answered counts whole requests answered inside the window: with few of them it moves in steps "
              f"of one request's texts over the window ({request_texts / args.window:.1f} texts/s here)."]
    if overload is not None:
        accepted = overload.bulk_latencies
        p50 = statistics.median(accepted) if accepted else float("nan")
        p99 = float(np.percentile(accepted, 99)) if accepted else float("nan")
        refusals = overload.refusal_latencies
        lines += ["", f"## Overload: {overload.num_bulk} bulk clients for {overload.window:g} s (default flags)", "",
                  "| responses | 200 | 429 | 504 | other failures | 429 p99 ms | 429 max ms | 429 p99 ms, server | "
                  "429 max ms, server | accepted p50 s | accepted p99 s | p99 / p50 |",
                  "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
                  f"| {sum(overload.statuses.values())} | {overload.statuses.get(200, 0)} | "
                  f"{overload.statuses.get(429, 0)} | {overload.statuses.get(504, 0)} | "
                  f"{overload.failures - overload.statuses.get(504, 0)} | {percentile_ms(refusals, 99):.1f} | "
                  f"{1000 * max(refusals, default=float('nan')):.1f} | "
                  f"{percentile_ms(overload.refusal_server_latencies, 99):.1f} | "
                  f"{1000 * max(overload.refusal_server_latencies, default=float('nan')):.1f} | "
                  f"{p50:.1f} | {p99:.1f} | "
                  f"**{p99 / p50:.2f}** |",
                  "", "A 429's time as the client saw it (from the first byte of its request sent to the answer "
                  "read) and as the server timed it (from the request's headers read to its answer's): the "
                  "difference is the clients' own processes and the body's upload on the shared cores.",
                  "", f"- client CPU, max of one process: {max(overload.cpu_shares):.1%}"]
    examples = [x for rounds in results.values() for rows in rounds for p in rows
                for x in p.failure_lines][:MAX_FAILURE_LINES]
    if examples:
        lines += ["", "Failures, examples:", *(f"- `{x}`" for x in examples)]
    spread = max(p.start_spread for rounds in results.values() for rows in rounds for p in rows)
    lines += ["", f"- client starts within {1000 * spread:.1f} ms of one another in every measurement"]
    return "\n".join(lines) + "\n"
