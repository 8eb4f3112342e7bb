"""Reranking through HTTP: one request's latency, throughput against the embedding path, and an
embedder beside a reranker in one server.

    python bench/rerank.py --embedder /tmp/bert-base-random --reranker /tmp/bert-base-ce-random \
        --device cuda --out bench/results/http/rerank-gpu.md            # bench/gpu_session.sh rerank
    python bench/rerank.py --embedder DIR --reranker DIR --device cpu --latency-requests 5 \
        --clients 2 --procs 1 --mixed-clients 1 --warmup 0.5 --window 2   # a smoke run on a CPU

Both models are of one shape (bench/tiny_model.py writes BERT-base's, random weights); every
server runs with default flags, `--model NAME=DIR` only. Documents are paragraphs of the
shared workload cut to --doc-tokens tokens; queries are short texts of the same file.

1. Latency: one query with --documents documents, one request at a time on one keep-alive
   connection, the server otherwise idle: p50 and p99 over --latency-requests requests.
2. Throughput: --clients connections in --procs spawned processes, each sending requests of
   --load-docs documents back to back; the rerank server on (query, documents), then the
   embedding server on the same documents. Only requests answered inside the timed window
   (it opens --warmup seconds after the common start and lasts --window seconds) count;
   tokens are those each request's `usage` reports (a pair counts its query and special
   tokens too), so documents/s is given beside tokens/s.
3. Together: the embedder and the reranker in one server (`--model emb=... --model rr=...`),
   --mixed-clients connections per model in --mixed-procs processes each, both loads at
   once; each model's rate against the same clients sending to a server of that model alone.
   The sum of the two ratios is the share of one model's rate the device keeps while it
   serves both: where one model alone already fills the device, each ratio is near a half.

Clients are the lean ones of the load generator (bench/lib/lean_http.py): bodies encoded
beforehand, responses read as bytes. A non-200 answer or a request lost below HTTP (reset,
broken pipe, closed without a response) is a failed request, counted in the report, and
the run exits 1 on any. Each client process reports its CPU share of a core while sending:
one near 100 % measures itself, not the server.
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing
import shlex
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# Only light imports at the top: the spawned client processes import this module again.
from bench.lib.common import DEFAULT_DATA, ServerProcess, build_texts, hardware, load_texts, publish  # noqa: E402
from bench.lib.lean_http import AsyncConnection, BlockingConnection, TransportError  # noqa: E402

EMB, RR = "emb", "rr"
PATHS = {EMB: "/v1/embeddings", RR: "/v1/rerank"}
MAX_FAILURE_LINES = 5


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--embedder", type=Path, required=True, help="an embedder's directory")
    p.add_argument("--reranker", type=Path, required=True, help="a cross-encoder of the embedder's shape")
    p.add_argument("--device", default="cuda", help="cpu adds `--devices cpu`; otherwise the server's defaults")
    p.add_argument("--server-arg", action="append", default=[],
                   help="extra `serve` flag, passed through (repeatable; write --server-arg=--flag)")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--documents", type=int, default=100, help="documents of the latency request")
    p.add_argument("--doc-tokens", type=int, default=200, help="each document cut to this many tokens")
    p.add_argument("--pool", type=int, default=2000, help="distinct documents the loads draw from")
    p.add_argument("--latency-requests", type=int, default=200)
    p.add_argument("--load-docs", type=int, default=20, help="documents per request under load")
    p.add_argument("--clients", type=int, default=64, help="connections of the throughput loads")
    p.add_argument("--procs", type=int, default=8, help="client processes of the throughput loads")
    p.add_argument("--mixed-clients", type=int, default=16, help="connections per model in the mixed load")
    p.add_argument("--mixed-procs", type=int, default=4, help="client processes per model in the mixed load")
    p.add_argument("--warmup", type=float, default=2.0, help="seconds the clients send before the window opens")
    p.add_argument("--window", type=float, default=8.0, help="seconds of each timed window")
    p.add_argument("--out", type=Path, default=None, help="write the markdown report here")
    return p.parse_args(argv)


# --- the workload -------------------------------------------------------------------------

def plain_tokenizer(tokenizer_file: Path):
    """The model's tokenizer with its saved padding and truncation off: each text's own tokens."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def cut_documents(tokenizer_file: Path, texts: list[str], tokens: int) -> list[str]:
    """Each text cut after its first `tokens` tokens (texts shorter than that are left out)."""
    tokenizer = plain_tokenizer(tokenizer_file)
    documents = []
    for text, encoding in zip(texts, tokenizer.encode_batch(texts, add_special_tokens=False)):
        if len(encoding.offsets) >= tokens:
            documents.append(text[: encoding.offsets[tokens - 1][1]])
    return documents


def short_queries(tokenizer_file: Path, data: Path, n: int) -> list[str]:
    """n texts of 8 to 24 tokens, from the back of the file (a search query's size)."""
    tokenizer = plain_tokenizer(tokenizer_file)
    pool = load_texts(100_000, data)[::-1]
    lengths = [len(e.ids) for e in tokenizer.encode_batch(pool[:20_000], add_special_tokens=False)]
    return [t for t, k in zip(pool, lengths) if 8 <= k <= 24][:n]


@dataclass(frozen=True)
class Body:
    kind: str  # EMB | RR
    content: bytes
    documents: int
    tokens: int = 0  # the answer's usage.total_tokens, read once before any timing


def encode_bodies(kind: str, queries: list[str], documents: list[str], per_request: int) -> list[Body]:
    encoder = msgspec.json.Encoder()
    bodies = []
    for i, lo in enumerate(range(0, len(documents) - per_request + 1, per_request)):
        docs = documents[lo : lo + per_request]
        payload = ({"model": EMB, "input": docs, "encoding_format": "base64"} if kind == EMB else
                   {"model": RR, "query": queries[i % len(queries)], "documents": docs})
        bodies.append(Body(kind, encoder.encode(payload), len(docs)))
    return bodies


def with_tokens(url: str, bodies: list[Body]) -> list[Body]:
    """Each body sent once (also the server's warm-up on these shapes), its usage kept."""
    connection = BlockingConnection(url, timeout=300)
    counted = []
    try:
        for body in bodies:
            status, answer = connection.post(PATHS[body.kind], body.content)
            if status != 200:
                raise RuntimeError(f"{PATHS[body.kind]} answered {status}: {answer[:300]!r}")
            reply = msgspec.json.decode(answer)
            if body.kind == RR and sorted(r["index"] for r in reply["results"]) != list(range(body.documents)):
                raise RuntimeError("a rerank answer lacks documents")
            counted.append(Body(body.kind, body.content, body.documents, int(reply["usage"]["total_tokens"])))
    finally:
        connection.close()
    return counted


# --- clients (spawned processes) ----------------------------------------------------------

@dataclass
class LoadResult:
    started: float
    stopped: float
    cpu_seconds: float
    tokens: dict[str, int] = field(default_factory=dict)  # per kind, answered inside the window
    documents: dict[str, int] = field(default_factory=dict)
    requests: dict[str, int] = field(default_factory=dict)
    failures: int = 0
    transport_errors: int = 0
    failure_lines: list[str] = field(default_factory=list)

    @property
    def cpu_share(self) -> float:
        return self.cpu_seconds / max(self.stopped - self.started, 1e-9)


def run_load(url: str, bodies: list[Body], connections: int, first: int, start_at: float, opens: float,
             closes: float) -> LoadResult:
    """One client process: `connections` keep-alive connections, each sending the bodies in turn
    (from its own offset) back to back from start_at until the window closes."""
    import asyncio

    import uvloop

    result = LoadResult(0.0, 0.0, 0.0)

    def fail(line: str) -> None:
        result.failures += 1
        if len(result.failure_lines) < MAX_FAILURE_LINES:
            result.failure_lines.append(line)

    async def client(offset: int) -> None:
        connection = AsyncConnection(url)
        i = offset
        while time.monotonic() < closes:
            body = bodies[i % len(bodies)]
            i += 1
            try:
                status, answer = await connection.post(PATHS[body.kind], body.content)
            except TransportError as exc:
                result.transport_errors += 1
                fail(f"transport: {exc}")
                await asyncio.sleep(0.01)  # a server that refuses at once must not spin this loop
                continue
            answered = time.monotonic()
            if status != 200:
                fail(f"{status}: {answer[:200].decode(errors='replace')}")
            elif opens <= answered <= closes:
                result.tokens[body.kind] = result.tokens.get(body.kind, 0) + body.tokens
                result.documents[body.kind] = result.documents.get(body.kind, 0) + body.documents
                result.requests[body.kind] = result.requests.get(body.kind, 0) + 1
        await connection.close()

    async def drive() -> None:
        await asyncio.gather(*[client(first + k * 7) for k in range(connections)])

    delay = start_at - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    cpu, result.started = time.process_time(), time.monotonic()
    uvloop.run(drive())
    result.cpu_seconds, result.stopped = time.process_time() - cpu, time.monotonic()
    return result


@dataclass
class Window:
    seconds: float
    results: list[LoadResult]

    def rate(self, kind: str, what: str = "tokens") -> float:
        return sum(getattr(r, what).get(kind, 0) for r in self.results) / self.seconds

    @property
    def failures(self) -> int:
        return sum(r.failures for r in self.results)

    @property
    def transport_errors(self) -> int:
        return sum(r.transport_errors for r in self.results)


def timed_window(pool: ProcessPoolExecutor, url: str, loads: list[tuple[list[Body], int, int]], warmup: float,
                 window: float) -> Window:
    """loads: (bodies, connections, processes) per model; every process starts at one instant."""
    start_at = time.monotonic() + 1.0
    opens, closes = start_at + warmup, start_at + warmup + window
    futures = []
    for bodies, connections, procs in loads:
        for p in range(procs):
            n = connections // procs + (p < connections % procs)
            futures.append(pool.submit(run_load, url, bodies, max(1, n), 13 * p, start_at, opens, closes))
    return Window(window, [f.result() for f in futures])


def latency(url: str, body: Body, requests: int,
            warmups: int = 10) -> tuple[list[float], list[str], list[dict[str, float]]]:
    """One request at a time on one keep-alive connection: seconds, failures and the server's
    phases (ms, from its x-<phase>-time-ms headers) of each answered request."""
    connection = BlockingConnection(url, timeout=120)
    seconds, failures, phases = [], [], []
    try:
        for i in range(warmups + requests):
            t = time.perf_counter()
            try:
                status, answer = connection.post(PATHS[body.kind], body.content)
            except TransportError as exc:
                failures.append(f"transport: {exc}")
                continue
            elapsed = time.perf_counter() - t
            if status != 200:
                failures.append(f"{status}: {answer[:200].decode(errors='replace')}")
            elif i >= warmups:
                seconds.append(elapsed)
                phases.append(connection.timings)
    finally:
        connection.close()
    return seconds, failures, phases


# --- the run ------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    devices = ["--devices", "cpu"] if args.device == "cpu" else []
    alone = {EMB: [*devices, "--model", f"{EMB}={args.embedder}", *args.server_arg],
             RR: [*devices, "--model", f"{RR}={args.reranker}", *args.server_arg]}
    together = [*devices, "--model", f"{EMB}={args.embedder}", "--model", f"{RR}={args.reranker}", *args.server_arg]

    tokenizer = args.reranker / "tokenizer.json"
    paragraphs = build_texts(args.data, 3 * args.pool, 4)  # four paragraphs: most reach --doc-tokens
    documents = cut_documents(tokenizer, paragraphs, args.doc_tokens)[: args.pool]
    queries = short_queries(tokenizer, args.data, 200)
    if len(documents) < max(args.documents, args.load_docs):
        sys.exit(f"rerank: only {len(documents)} documents of {args.doc_tokens} tokens in {args.data}")
    started = time.monotonic()
    windows: dict[str, Window] = {}
    failures: list[str] = []
    with ProcessPoolExecutor(max(args.procs, 2 * args.mixed_procs),
                             mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(time.sleep, [0.1] * max(args.procs, 2 * args.mixed_procs)))  # start them before any timing

        def serve(flags: list[str]):
            return ServerProcess(*flags, timeout=600)

        bodies: dict[str, list[Body]] = {}
        for kind in (RR, EMB):  # each model served alone: its many-client and its mixed-share baselines
            server = serve(alone[kind])
            try:
                bodies[kind] = with_tokens(server.url, encode_bodies(kind, queries, documents, args.load_docs))
                if kind == RR:  # the one-query latency, on the reranker alone
                    big = with_tokens(server.url, encode_bodies(RR, queries, documents[: args.documents],
                                                                args.documents))[0]
                    latencies, lost, phases = latency(server.url, big, args.latency_requests)
                    failures += lost
                for name, clients, procs in (("many", args.clients, args.procs),
                                             ("mixed alone", args.mixed_clients, args.mixed_procs)):
                    windows[f"{kind} {name}"] = timed_window(pool, server.url, [(bodies[kind], clients, procs)],
                                                             args.warmup, args.window)
            finally:
                server.stop()
        rr_bodies, emb_bodies = bodies[RR], bodies[EMB]
        server = serve(together)
        try:
            with_tokens(server.url, rr_bodies[:4] + emb_bodies[:4])
            loads = [(emb_bodies, args.mixed_clients, args.mixed_procs), (rr_bodies, args.mixed_clients,
                                                                           args.mixed_procs)]
            windows["together"] = timed_window(pool, server.url, loads, args.warmup, args.window)
        finally:
            server.stop()
    failed = len(failures) + sum(w.failures for w in windows.values())  # the latency's, then the loads'
    failures += [line for w in windows.values() for r in w.results for line in r.failure_lines]
    report = render(args, big, latencies, phases, windows, failed, failures, alone, together, time.monotonic() - started)
    publish(report, args.out)
    return 1 if failed else 0


def render(args, big: Body, latencies: list[float], phases: list[dict[str, float]], windows: dict[str, Window], failed: int, failures: list[str],
           alone: dict[str, list[str]], together: list[str], seconds: float) -> str:
    def ms(q: float) -> str:
        return f"{1000 * float(np.percentile(latencies, q)):.1f}" if latencies else "-"

    shares = [r.cpu_share for w in windows.values() for r in w.results]
    transport = sum(w.transport_errors for w in windows.values())
    command = "python bench/rerank.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    rr, emb, mixed = windows["rr many"], windows["emb many"], windows["together"]
    rr_ratio = mixed.rate(RR) / max(windows["rr mixed alone"].rate(RR), 1e-9)
    emb_ratio = mixed.rate(EMB) / max(windows["emb mixed alone"].rate(EMB), 1e-9)
    lines = [
        "# Reranking through HTTP",
        "",
        f"- command: `{command}`",
        f"- hardware: {hardware(args.device)}",
        f"- date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- models: embedder {args.embedder.name}, reranker {args.reranker.name}; servers with default flags: "
        f"`{' '.join(alone[RR])}`, `{' '.join(alone[EMB])}`, `{' '.join(together)}`",
        f"- documents: {args.data.name} paragraphs cut to {args.doc_tokens} tokens; queries of 8-24 tokens; "
        f"windows of {args.window:g} s after {args.warmup:g} s of warm-up; {seconds:.0f} s in all",
        f"- failed requests: **{failed}** ({transport} transport errors: reset, broken pipe or closed without a "
        "response)" + (f", first: {failures[0]}" if failures else ""),
        "- load generator: lean clients (bench/lib/lean_http.py) in spawned processes, CPU share of a core each while "
        + (f"sending: max {max(shares):.1%}, mean {statistics.mean(shares):.1%}" if shares else "sending: -")
        + " (a process near 100 % measures itself, not the server)",
        "",
        f"## One query, {big.documents} documents, no other load",
        "",
        "| requests | tokens a request | p50 ms | p99 ms | target p50 |",
        "| ---: | ---: | ---: | ---: | ---: |",
        f"| {len(latencies)} | {big.tokens} | **{ms(50)}** | {ms(99)} | <= 15 ms |",
        "",
        "- where it went, as the server timed it (medians, ms): " + ", ".join(
            f"{name} {statistics.median(p[name] for p in phases if name in p):.1f}"
            for name in ("preparation", "queue", "inference", "answer", "tokenization", "total")
            if any(name in p for p in phases)),
        "",
        f"## Many clients: rerank against the embedding path ({args.clients} connections in {args.procs} "
        f"processes, {args.load_docs} documents a request)",
        "",
        "| path | tokens/s | documents/s | requests/s |",
        "| --- | ---: | ---: | ---: |",
        f"| /v1/rerank (query + document pairs) | {rr.rate(RR):.0f} | {rr.rate(RR, 'documents'):.0f} "
        f"| {rr.rate(RR, 'requests'):.1f} |",
        f"| /v1/embeddings (the same documents) | {emb.rate(EMB):.0f} | {emb.rate(EMB, 'documents'):.0f} "
        f"| {emb.rate(EMB, 'requests'):.1f} |",
        "",
        f"- **rerank / embeddings, tokens/s: {rr.rate(RR) / max(emb.rate(EMB), 1e-9):.3f}x** (target >= 0.9x); "
        f"documents/s: {rr.rate(RR, 'documents') / max(emb.rate(EMB, 'documents'), 1e-9):.3f}x",
        "",
        f"## Together: both models in one server ({args.mixed_clients} connections per model in "
        f"{args.mixed_procs} processes each)",
        "",
        "| model | alone tokens/s | together tokens/s | together / alone |",
        "| --- | ---: | ---: | ---: |",
        f"| reranker | {windows['rr mixed alone'].rate(RR):.0f} | {mixed.rate(RR):.0f} | **{rr_ratio:.3f}x** |",
        f"| embedder | {windows['emb mixed alone'].rate(EMB):.0f} | {mixed.rate(EMB):.0f} | **{emb_ratio:.3f}x** |",
        "",
        f"- target: each >= 0.9x; sum of the two ratios {rr_ratio + emb_ratio:.3f} (the share of one model's "
        "rate the device keeps while serving both: near 1 where one model alone already fills it)",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
