"""Soak: a long run of short requests; the server's resident memory must stay flat.

    python -m bench.soak --inputs 200000

Starts its own server, sends requests of `--batch` short texts from `--clients` concurrent
clients until `--inputs` inputs have been answered, and samples the server's resident set
size (summed over its processes: the engine may run in its own) as it goes. The level
after warm-up (the first `--warmup` inputs) is the
baseline; the run passes when no later sample exceeds it by more than `--tolerance`
(10 %) and every request succeeded with the right number of vectors.

It writes no file under bench/results/: docs/reliability.md quotes its summary (`--json` keeps it).

    python -m bench.soak --mixed --minutes 10 --out bench/results/cpu/soak-cpu-minilm.md

The mixed soak serves the default embedder and a reranker of its shape (random weights,
bench/tiny_model.py) with default flags otherwise, and has `--clients` concurrent clients send,
for `--minutes`, every route's requests from one text to a thousand, texts past the model's
limit and bad bodies (bench/lib/soak_mix.py). It samples the resident set of each process
(supervisor, front ends, engines) on its own every `--sample-seconds`; each one's level in the
`--baseline-seconds` after the first `--warmup-seconds` is its baseline. It passes when no
process's later samples exceed its baseline by more than `--tolerance` (15 %), every good
request got its 200 with one vector or score per input, every bad one its 4xx, and no
process was restarted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from pathlib import Path

import httpx

from bench.lib.common import ServerProcess, descendants, load_texts
from bench.lib.soak_run import mixed_soak
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


def short_soak(args) -> bool:
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
    tolerance = 0.10 if args.tolerance is None else args.tolerance
    return summary["failed"] == 0 and summary["inputs"] >= args.inputs and summary["peak_over_baseline"] <= tolerance


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--inputs", type=int, default=200_000)
    p.add_argument("--batch", type=int, default=64, help="texts per request")
    p.add_argument("--clients", type=int, default=None, help="concurrent clients (16; mixed: 8)")
    p.add_argument("--warmup", type=int, default=20_000, help="inputs before the baseline sample")
    p.add_argument("--sample-every", type=int, default=50, help="requests between RSS samples")
    p.add_argument("--tolerance", type=float, default=None, help="growth allowed past the baseline (0.10; mixed: 0.15)")
    p.add_argument("--deadline", type=float, default=3600)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None)
    mixed = p.add_argument_group("the mixed soak")
    mixed.add_argument("--mixed", action="store_true", help="every route, large requests and bad bodies, for a time")
    mixed.add_argument("--minutes", type=float, default=10.0)
    mixed.add_argument("--warmup-seconds", type=float, default=60.0, help="load before the baseline")
    mixed.add_argument("--baseline-seconds", type=float, default=10.0, help="the baseline's window after the warm-up")
    mixed.add_argument("--sample-seconds", type=float, default=1.0)
    mixed.add_argument("--idle-seconds", type=float, default=10.0, help="sampled after the load, before the stop")
    mixed.add_argument("--reranker", type=Path, default=None,
                       help="a cross-encoder directory (default: one of the embedder's shape, random weights)")
    mixed.add_argument("--server-arg", action="append", default=[], help="a flag for the server (repeatable)")
    mixed.add_argument("--out", type=Path, default=None, help="write the markdown report here")
    args = p.parse_args()

    if args.clients is None:
        args.clients = 8 if args.mixed else 16
    passed = mixed_soak(args) if args.mixed else short_soak(args)
    print("PASS" if passed else "FAIL")
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
