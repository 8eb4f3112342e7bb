"""CPU benchmark: sentence-transformers vs the engine vs the HTTP server, side by side, one run.

    python bench/cpu_bench.py --num-texts 2000 --rounds 3 --out bench/results/cpu.md

Every round times the three on the same texts, in turn; the table reports each one's median
texts/s and the ratios, and checks that the three agree (cosine).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime
import statistics
import sys
import time
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import ServerProcess, load_texts, machine_description, publish  # noqa: E402
from engine.config import EngineConfig  # noqa: E402
from engine.rose.engine import Engine  # noqa: E402


async def http_embed(url: str, texts: list[str], num_clients: int, request_size: int) -> np.ndarray:
    """num_clients clients take requests of request_size texts from one shared queue."""
    chunks = [(lo, texts[lo : lo + request_size]) for lo in range(0, len(texts), request_size)]
    results: dict[int, np.ndarray] = {}
    queue = asyncio.Queue()
    for chunk in chunks:
        queue.put_nowait(chunk)

    async def client_loop(client: httpx.AsyncClient) -> None:
        while not queue.empty():
            lo, batch = queue.get_nowait()
            r = await client.post(url + "/v1/embeddings", json={"input": batch, "encoding_format": "base64"})
            r.raise_for_status()
            for i, item in enumerate(r.json()["data"]):
                results[lo + i] = np.frombuffer(base64.b64decode(item["embedding"]), dtype="<f4")

    async with httpx.AsyncClient(timeout=300) as client:
        await asyncio.gather(*[client_loop(client) for _ in range(num_clients)])
    return np.stack([results[i] for i in range(len(texts))])


def min_cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(((a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))).min())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-texts", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--request-size", type=int, default=32, help="texts per HTTP request")
    parser.add_argument("--max-batch-tokens", type=int, default=16384)
    parser.add_argument("--out", type=Path, default=None, help="write the markdown table here")
    args = parser.parse_args()

    from sentence_transformers import SentenceTransformer

    texts = load_texts(args.num_texts)
    engine = Engine(EngineConfig(max_batch_tokens=args.max_batch_tokens))
    engine.warm_up()
    st = SentenceTransformer(str(engine.spec.path), device="cpu")
    st.encode(texts[:64], batch_size=32)
    server = ServerProcess("--max-batch-tokens", str(args.max_batch_tokens))
    num_tokens = sum(len(ids) for ids in engine.tokenize(texts))

    timings: dict[str, list[float]] = {"sentence-transformers encode(batch_size=32)": [], "engine (no HTTP)": [],
                                       f"HTTP, {args.clients} clients x {args.request_size} texts": []}
    names = list(timings)
    try:
        for round_index in range(args.rounds):
            t = time.perf_counter()
            ref = st.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
            timings[names[0]].append(time.perf_counter() - t)
            t = time.perf_counter()
            ours = engine.embed(texts)
            timings[names[1]].append(time.perf_counter() - t)
            t = time.perf_counter()
            over_http = asyncio.run(http_embed(server.url, texts, args.clients, args.request_size))
            timings[names[2]].append(time.perf_counter() - t)
            print(f"round {round_index}: " + ", ".join(f"{n}: {v[-1]:.2f} s" for n, v in timings.items()), flush=True)
    finally:
        server.stop()

    cos_engine, cos_http = min_cosine(ours, ref), min_cosine(over_http, ours)
    rate = {n: args.num_texts / statistics.median(v) for n, v in timings.items()}
    lines = [
        "# CPU benchmark",
        "",
        f"- command: `python bench/cpu_bench.py --num-texts {args.num_texts} --rounds {args.rounds} "
        f"--clients {args.clients} --request-size {args.request_size} --max-batch-tokens {args.max_batch_tokens}`",
        f"- machine: {machine_description()}",
        f"- date: {datetime.date.today().isoformat()}",
        f"- workload: the first {args.num_texts} paragraphs of stdlib_docstrings.jsonl ({num_tokens} tokens), "
        "all-MiniLM-L6-v2 fp32; median of the rounds, each round runs the three in turn",
        f"- agreement: engine vs sentence-transformers min cosine {cos_engine:.7f}; HTTP vs engine min cosine "
        f"{cos_http:.7f}",
        "",
        "| path | median s | texts/s | tokens/s |",
        "| --- | ---: | ---: | ---: |",
    ]
    for n, v in timings.items():
        lines.append(f"| {n} | {statistics.median(v):.2f} | {rate[n]:.0f} | {num_tokens / statistics.median(v):.0f} |")
    lines += [
        "",
        f"- engine / sentence-transformers: **{rate[names[1]] / rate[names[0]]:.2f}x** (target >= 1.3x)",
        f"- HTTP / engine: **{rate[names[2]] / rate[names[1]]:.2f}x** (target >= 0.9x)",
        f"- HTTP / sentence-transformers: **{rate[names[2]] / rate[names[0]]:.2f}x**",
        "",
        "Rounds (s): " + "; ".join(f"{n}: " + ", ".join(f"{x:.2f}" for x in v) for n, v in timings.items()),
    ]
    report = "\n".join(lines) + "\n"
    publish(report, args.out)


if __name__ == "__main__":
    main()
