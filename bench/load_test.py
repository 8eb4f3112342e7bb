"""Bounded load on loopback: many concurrent clients, every vector checked, nothing lost.

    python -m bench.load_test --requests 10000 --clients 64 --max-queued-tokens 3000

Starts its own server (or uses --url), computes each pool text's reference vector with the
engine in process, one text per batch (so no packing or batching is involved), then sends
`--requests` requests of 1 to 64 texts from `--clients` concurrent clients. Every response's
vectors are compared with the references of its own texts, in order. A 429 must come in
OpenAI's envelope with an integer Retry-After in [1, 60]; the client waits that long and
sends the same request again (counted: rejected again, or ok). Bounded: it stops sending at --deadline seconds.

It writes no file under bench/results/: docs/reliability.md quotes its summary (`--json` keeps it).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import math
import platform
import random
import statistics
import sys
import time

import httpx
import numpy as np

from bench.lib.common import ServerProcess, load_texts

MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def reference_vectors(texts: list[str], max_batch_tokens: int) -> tuple[np.ndarray, list[int]]:
    """The pool through the engine in process, in pool order: [N, dim] float32 and token counts.

    The server packs each text with other requests' texts in other combinations, so a
    mix-up of rows, requests or batches shows as a wrong vector.
    """
    from rose_embed.engine.contract.config import EngineConfig
    from rose_embed.engine.rose.engine import Engine

    engine = Engine(EngineConfig(max_batch_tokens=max_batch_tokens))
    return engine.embed(texts), [len(s) for s in engine.tokenize(texts)]


def request_size(rng: random.Random) -> int:
    """1 to 64 texts, log-uniform: as many requests of 1-2 texts as of 32-64 (keeps a 2-core run short)."""
    return min(64, int(2 ** rng.uniform(0, math.log2(65))))


def decode(item: dict) -> np.ndarray:
    embedding = item["embedding"]
    if isinstance(embedding, str):
        return np.frombuffer(base64.b64decode(embedding), dtype="<f4")
    return np.asarray(embedding, dtype=np.float32)


class Tally:
    def __init__(self):
        self.ok = self.wrong = self.lost = self.rejected = self.retried_ok = self.retry_rejected = 0
        self.texts = 0
        self.other_status: dict[int, int] = {}
        self.bad_429: list[str] = []
        self.latencies: list[float] = []
        self.max_abs_diff = 0.0


async def one_request(client, url, rng, pool, refs, tokens, tally, atol) -> None:
    idx = [rng.randrange(len(pool)) for _ in range(request_size(rng))]
    body = {"input": [pool[i] for i in idx], "model": MODEL,
            "encoding_format": "float" if rng.random() < 0.1 else "base64"}
    attempt = 0
    while True:
        started = time.perf_counter()
        try:
            r = await client.post(url + "/v1/embeddings", json=body)
        except httpx.HTTPError as exc:
            tally.lost += 1
            tally.other_status.setdefault(-1, 0)
            tally.other_status[-1] += 1
            print(f"lost: {type(exc).__name__}: {exc}", file=sys.stderr)
            return
        if r.status_code == 429:
            retry_after = r.headers.get("retry-after", "")
            error = r.json().get("error", {})
            if not retry_after.isdigit() or not 1 <= int(retry_after) <= 60 or error.get("code") != "rate_limit_exceeded":
                tally.bad_429.append(f"{retry_after!r} {r.text[:200]}")
            if attempt == 0:
                tally.rejected += 1
            else:
                tally.retry_rejected += 1
            attempt += 1
            await asyncio.sleep(int(retry_after) if retry_after.isdigit() else 1)
            continue
        break
    if r.status_code != 200:
        tally.other_status[r.status_code] = tally.other_status.get(r.status_code, 0) + 1
        tally.lost += 1
        return
    tally.latencies.append(time.perf_counter() - started)
    if attempt:
        tally.retried_ok += 1
    data = r.json()
    got = [d["index"] for d in data["data"]]
    vectors = np.stack([decode(d) for d in data["data"]]) if data["data"] else np.zeros((0, 0))
    diff = float(np.abs(vectors - refs[idx]).max()) if got == list(range(len(idx))) else float("inf")
    tally.max_abs_diff = max(tally.max_abs_diff, diff)
    if diff > atol or data["usage"]["prompt_tokens"] != sum(tokens[i] for i in idx):
        tally.wrong += 1
    else:
        tally.ok += 1
        tally.texts += len(idx)


async def drive(url, args, pool, refs, tokens) -> tuple[Tally, float]:
    tally, rng = Tally(), random.Random(args.seed)
    counter = iter(range(args.requests))
    deadline = time.monotonic() + args.deadline
    limits = httpx.Limits(max_connections=args.clients, max_keepalive_connections=args.clients)

    async with httpx.AsyncClient(timeout=args.request_timeout, limits=limits) as client:
        async def worker() -> None:
            for _ in counter:
                if time.monotonic() > deadline:
                    return
                await one_request(client, url, rng, pool, refs, tokens, tally, args.atol)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(args.clients)))
    return tally, time.perf_counter() - started


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--requests", type=int, default=10_000)
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--pool", type=int, default=2000, help="distinct texts drawn from the shared workload")
    p.add_argument("--max-chars", type=int, default=32, help="texts are cut to this many characters (speed)")
    p.add_argument("--max-queued-tokens", type=int, default=4000, help="the server's 429 threshold")
    p.add_argument("--max-batch-tokens", type=int, default=4096)
    p.add_argument("--deadline", type=float, default=3600, help="stop sending after this many seconds")
    p.add_argument("--request-timeout", type=float, default=300)
    p.add_argument("--atol", type=float, default=1e-4, help="largest |difference| from the reference")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--url", default=None, help="use a running server instead of starting one")
    p.add_argument("--json", default=None, help="write the summary here too")
    args = p.parse_args()

    pool = [t[: args.max_chars] for t in load_texts(args.pool)]
    t0 = time.perf_counter()
    refs, tokens = reference_vectors(pool, args.max_batch_tokens)
    print(f"references: {len(pool)} texts in {time.perf_counter() - t0:.1f} s", flush=True)
    server = None
    if args.url is None:
        server = ServerProcess("--max-batch-tokens", str(args.max_batch_tokens),
                               "--max-queued-tokens", str(args.max_queued_tokens))
    try:
        tally, seconds = asyncio.run(drive(args.url or server.url, args, pool, refs, tokens))
    finally:
        if server is not None:
            server.stop()
    sent = tally.ok + tally.wrong + tally.lost
    lat = sorted(tally.latencies) or [0.0]
    summary = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": f"{platform.node()} "
        f"({platform.processor() or platform.machine()}, {len(__import__('os').sched_getaffinity(0))} cores)",
        "requests": sent, "clients": args.clients, "texts_checked": tally.texts, "ok": tally.ok,
        "wrong": tally.wrong, "lost": tally.lost, "other_status": tally.other_status,
        "rejected_429": tally.rejected, "retries_rejected_again": tally.retry_rejected,
        "retried_then_ok": tally.retried_ok, "malformed_429": len(tally.bad_429),
        "max_abs_diff": tally.max_abs_diff, "seconds": round(seconds, 1),
        "requests_per_s": round(sent / seconds, 1), "texts_per_s": round(tally.texts / seconds, 1),
        "latency_p50_s": round(statistics.median(lat), 3), "latency_p99_s": round(lat[int(0.99 * (len(lat) - 1))], 3),
        "max_queued_tokens": args.max_queued_tokens,
    }
    print(json.dumps(summary, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
    passed = (tally.wrong == 0 and tally.lost == 0 and not tally.bad_429 and sent == args.requests
              and tally.retried_ok == tally.rejected)
    print("PASS" if passed else "FAIL")
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
