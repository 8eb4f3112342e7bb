"""Which ASGI server carries the app faster: uvicorn (uvloop + httptools) or granian.

    python bench/asgi_bench.py --requests 3000 --clients 16 --out bench/results/asgi.md
    python bench/asgi_bench.py --engine instant --out bench/results/asgi-front-end.md

Both serve the same app and get the same traffic in one run: single short texts (where the
HTTP layer weighs most) and requests of 32 paragraphs. `--engine model` runs the default
model on the CPU; `--engine instant` puts an engine behind the app whose vectors are ready at
once (rows of a fixed 384-d table, the default model's width), so that what is measured is
the front end alone: tokenizing, batching, encoding, HTTP. The report gives the server's
CPU time per 1,000 texts, which depends much less than throughput on what else the machine
runs.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (  # noqa: E402
    REPO, free_port, load_texts, machine_description, process_cpu_seconds, publish, wait_until_healthy,
)


def app():
    """Factory both servers import: the default model with default settings, or (with
    ROSE_ASGI_BENCH_ENGINE=instant) the instant engine."""
    from server.app import create_app
    from server.config import ServerConfig

    if os.environ.get("ROSE_ASGI_BENCH_ENGINE") != "instant":
        return create_app(ServerConfig())
    import numpy as np
    import torch

    from engine.rose.lazy import LazyResult
    from tests.fake_engine import FakeEngine

    engine = FakeEngine(dim=384)
    table = np.random.default_rng(0).standard_normal((4096, 384)).astype(np.float32)
    table /= np.linalg.norm(table, axis=1, keepdims=True)
    table = torch.from_numpy(table)  # a CPU LazyResult is ready at once
    engine.execute_packed = lambda batch: LazyResult(table[torch.arange(batch.num_outputs) % len(table)],
                                                     batch.num_outputs)
    return create_app(ServerConfig(), engine=engine)


SERVERS = {
    "uvicorn (uvloop, httptools)": lambda port: [
        sys.executable, "-m", "uvicorn", "--factory", "bench.asgi_bench:app", "--port", str(port),
        "--loop", "uvloop", "--http", "httptools", "--log-level", "warning", "--no-access-log",
    ],
    "granian (asgi, uvloop)": lambda port: [
        sys.executable, "-m", "granian", "--interface", "asgi", "--factory", "--port", str(port),
        "--loop", "uvloop", "--log-level", "warning", "--no-access-log", "bench.asgi_bench:app",
    ],
}


async def drive(url: str, bodies: list[dict], clients: int) -> list[float]:
    latencies: list[float] = []
    queue: asyncio.Queue = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(body)

    async def client_loop(client: httpx.AsyncClient) -> None:
        while not queue.empty():
            body = queue.get_nowait()
            t = time.perf_counter()
            r = await client.post(url, json=body)
            r.raise_for_status()
            latencies.append(time.perf_counter() - t)

    async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=clients)) as client:
        await asyncio.gather(*[client_loop(client) for _ in range(clients)])
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--engine", choices=["model", "instant"], default="model",
                        help="the default model on the CPU, or an engine whose vectors are ready at once")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    texts = load_texts(32 * 64)
    workloads = {
        "single short text": [{"input": texts[i % len(texts)][:60]} for i in range(args.requests)],
        "32 paragraphs": [{"input": texts[(i * 32) % len(texts):][:32]} for i in range(args.requests // 20)],
    }
    rows = []
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", ROSE_ASGI_BENCH_ENGINE=args.engine)
    for name, command in SERVERS.items():
        port = free_port()
        proc = subprocess.Popen(command(port), cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            url = f"http://127.0.0.1:{port}"
            wait_until_healthy(url, proc)
            asyncio.run(drive(url + "/v1/embeddings", workloads["single short text"][:200], args.clients))
            for workload, bodies in workloads.items():
                t, cpu = time.perf_counter(), process_cpu_seconds(proc.pid)
                latencies = asyncio.run(drive(url + "/v1/embeddings", bodies, args.clients))
                elapsed, cpu = time.perf_counter() - t, process_cpu_seconds(proc.pid) - cpu
                num_texts = sum(len(body["input"]) if isinstance(body["input"], list) else 1 for body in bodies)
                latencies.sort()
                rows.append((name, workload, len(bodies) / elapsed, statistics.median(latencies) * 1e3,
                             latencies[int(0.99 * (len(latencies) - 1))] * 1e3, 1e3 * cpu / num_texts))
                print(rows[-1], flush=True)
        finally:
            proc.terminate()
            proc.wait(30)

    lines = [
        "# ASGI server: uvicorn vs granian",
        "",
        f"- command: `python bench/asgi_bench.py --requests {args.requests} --clients {args.clients} "
        f"--engine {args.engine}`",
        f"- machine: {machine_description()}",
        f"- date: {datetime.date.today().isoformat()}",
        f"- same app ({'the default model, CPU' if args.engine == 'model' else 'the instant engine'}), same "
        "httpx client in the same run; the client shares the cores. Server CPU: the server process and "
        "its children, per 1,000 texts",
        "",
        "| server | workload | requests/s | p50 ms | p99 ms | server CPU s / 1000 texts |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ] + [f"| {s} | {w} | {rps:.0f} | {p50:.1f} | {p99:.1f} | {cpu:.3f} |" for s, w, rps, p50, p99, cpu in rows]
    report = "\n".join(lines) + "\n"
    publish(report, args.out)


if __name__ == "__main__":
    main()
