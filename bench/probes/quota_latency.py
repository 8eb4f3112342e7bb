"""One short query at a time against the server at default flags, inside whatever CPU quota this
process runs under: what oversubscribed compute threads cost a small container.

    python bench/probes/quota_latency.py --queries 300 --out FILE [--server-arg=--num-threads=2 ...]

A pod limited to fewer CPUs than its node has (a cgroup CPU quota) sees every core in its
affinity mask: torch's default thread count, and any count read from the mask, then starts
more compute threads than the quota lets run, and the quota throttles them. The server counts
the quota (engine/contract/cpu_quota.py). Run this inside a cgroup with a quota (cgroup v1:
`cpu.cfs_quota_us`, v2: `cpu.max`) once with default flags and once with
`--server-arg=--num-threads=N` at the mask's size (what an uncapped count would start), and
compare the p50s. Each query is 8 to 16 tokens of real text, on one keep-alive connection,
`float` answers; the first queries warm the server up and are not counted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import msgspec
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.lib.common import ServerProcess, hardware, publish  # noqa: E402
from bench.lib.lean_http import BlockingConnection  # noqa: E402
from rose_embed.engine.contract.cpu_quota import available_cores, cgroup_cpu_limit  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "tests" / "data" / "stdlib_docstrings.jsonl"


def short_queries(count: int) -> list[bytes]:
    """Bodies of one short text each: the first 3 to 10 words of the workload's texts."""
    texts = [json.loads(line)["text"] for line in DATA.read_text().splitlines() if line.strip()]
    encoder = msgspec.json.Encoder()
    return [encoder.encode({"input": " ".join(texts[i % len(texts)].split()[: 3 + i % 8])}) for i in range(count)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--queries", type=int, default=300)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--server-arg", action="append", default=[], help="a flag for the server (repeatable)")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    flags = ["--devices", "cpu", *args.server_arg]
    bodies = short_queries(args.warmup + args.queries)
    server = ServerProcess(*flags)
    seconds = []
    try:
        connection = BlockingConnection(server.url)
        for i, body in enumerate(bodies):
            started = time.perf_counter()
            status, answer = connection.post("/v1/embeddings", body)
            if status != 200:
                sys.exit(f"quota_latency: {status}: {answer[:200]!r}")
            if i >= args.warmup:
                seconds.append(time.perf_counter() - started)
        connection.close()
    finally:
        server.stop()
    ms = np.array(seconds) * 1000
    mask = len(os.sched_getaffinity(0))
    lines = [
        "# One short query at a time, under the CPU quota",
        "",
        f"- command: `python bench/probes/quota_latency.py {' '.join(argv if argv is not None else sys.argv[1:])}`",
        f"- hardware: {hardware('cpu')}; affinity mask {mask} CPUs, cgroup quota "
        f"{cgroup_cpu_limit() or 'none'} CPU(s), so the server counts {available_cores()}",
        f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- server flags: `{' '.join(flags)}`; {args.queries} queries of 3-10 words after {args.warmup} to warm up",
        "",
        "| p50 ms | p90 ms | p99 ms |",
        "| ---: | ---: | ---: |",
        f"| {np.percentile(ms, 50):.2f} | {np.percentile(ms, 90):.2f} | {np.percentile(ms, 99):.2f} |",
    ]
    publish("\n".join(lines) + "\n", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
