"""Soak: a long run of short requests; the server's resident memory must stay flat.

    python -m bench.soak --inputs 200000

Starts its own server, sends requests of `--batch` short texts from `--clients` concurrent
clients until `--inputs` inputs have been answered, and samples the server's resident set
size (summed over its processes: the engine may run in its own) as it goes. The level
after warm-up (the first `--warmup` inputs) is the
baseline; the run passes when no later sample exceeds it by more than `--tolerance`
(10 %) and every request succeeded with the right number of vectors.

It writes no file under bench/results/: docs/reliability.md quotes its summary (`--json` keeps it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time

import httpx

from bench.lib.common import ServerProcess, descendants, load_texts
from rose_embed.engine.contract.memory import resident_bytes

MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def rss_bytes(pid: int) -> int:
    """The resident set of the server and every process under it (every engine runs in a
    process of its own: once an option for the CPU engine, now how every engine runs)."""
    return sum(resident_bytes(p) or 0 for p in [pid, *descendants(pid)])


async def run(url: str, pid: int, args, words: list[str]) -> dict:
    rng = random.Random(args.seed)
    done = {"inputs": 0, "requests": 0, "failed": 0}
    samples: list[tuple[int, int]] = []  # (inputs answered, rss)
    deadline = time.monotonic() + args.deadline

    async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=args.clients)) as client:
        async def worker() -> None:
            while done["inputs"] < args.inputs and time.monotonic() < deadline:
                # Fresh texts every time (a word and a number), so no cache can hide growth.
                texts = [f"{rng.choice(words)} {rng.randrange(10**6)}" for _ in range(args.batch)]
                body = {"input": texts, "model": MODEL, "encoding_format": rng.choice(["float", "base64"])}
                r = await client.post(url + "/v1/embeddings", json=body)
                if r.status_code != 200 or len(r.json()["data"]) != len(texts):
                    done["failed"] += 1
                    continue
                done["inputs"] += len(texts)
                done["requests"] += 1
                if done["requests"] % args.sample_every == 0:
                    samples.append((done["inputs"], rss_bytes(pid)))

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(args.clients)))
        seconds = time.perf_counter() - started
    samples.append((done["inputs"], rss_bytes(pid)))
    after_warmup = [rss for n, rss in samples if n >= args.warmup]
    baseline = after_warmup[0]
    peak = max(after_warmup)
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "inputs": done["inputs"],
        "requests": done["requests"], "failed": done["failed"], "seconds": round(seconds, 1),
        "inputs_per_s": round(done["inputs"] / seconds, 1), "rss_after_warmup_mib": round(baseline / 2**20, 1),
        "rss_peak_mib": round(peak / 2**20, 1), "rss_final_mib": round(samples[-1][1] / 2**20, 1),
        "peak_over_baseline": round(peak / baseline - 1, 4), "samples": len(samples),
        "rss_mib_by_inputs": [(n, round(rss / 2**20, 1)) for n, rss in samples[:: max(1, len(samples) // 12)]],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--inputs", type=int, default=200_000)
    p.add_argument("--batch", type=int, default=64, help="texts per request")
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--warmup", type=int, default=20_000, help="inputs before the baseline sample")
    p.add_argument("--sample-every", type=int, default=50, help="requests between RSS samples")
    p.add_argument("--tolerance", type=float, default=0.10)
    p.add_argument("--deadline", type=float, default=3600)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None)
    args = p.parse_args()

    words = sorted({w for t in load_texts(500) for w in t.split() if w.isalpha()})
    server = ServerProcess("--max-batch-tokens", "4096")
    try:
        summary = asyncio.run(run(server.url, server.proc.pid, args, words))
    finally:
        server.stop()
    print(json.dumps(summary, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
    passed = summary["failed"] == 0 and summary["inputs"] >= args.inputs and summary["peak_over_baseline"] <= args.tolerance
    print("PASS" if passed else "FAIL")
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
