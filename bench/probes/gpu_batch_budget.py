"""How a GPU batch's speed and time grow with its token budget, per model shape: what the warm-up's
choice of a budget and the loop's bound on the work in flight (engine/rose/batch_budget.py,
engine/queue/engine_loop.py) should read.

    python3 bench/probes/gpu_batch_budget.py --models /tmp/minilm-random,/tmp/bert-base-random,/tmp/qwen3-random

Per model (the engine as a server loads it: default flags, every bucket captured) and per batch of
N tokens in texts of 32 and of 500 tokens: one batch's time launched alone and waited for (serial,
as with one batch in flight), the tokens/s with two batches in flight (pipelined), and each rate
over the full budget's pipelined rate. Then a batch of one 12-token query alone: what an express
batch costs the device.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from rose_embed.engine.contract.config import EngineConfig  # noqa: E402
from rose_embed.engine.rose.engine import Engine  # noqa: E402

SIZES = (1024, 2048, 3072, 4096, 6144, 8192, 12288, 16384)
LENGTHS = (32, 500)
REPEATS = 12


def serial_ms(engine: Engine, seqs: list[np.ndarray]) -> float:
    times = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        engine.execute(seqs).wait()
        times.append(time.perf_counter() - started)
    return 1000 * float(np.median(times))


def pipelined_tps(engine: Engine, seqs: list[np.ndarray]) -> float:
    tokens = sum(len(s) for s in seqs)
    started = time.perf_counter()
    ahead = engine.execute(seqs)
    for _ in range(REPEATS * 2):
        nxt = engine.execute(seqs)
        ahead.wait()
        ahead = nxt
    ahead.wait()
    return tokens * (REPEATS * 2 + 1) / (time.perf_counter() - started)


def probe(path: str, device: str, sizes: tuple[int, ...]) -> None:
    engine = Engine(EngineConfig(model=path, device=device, capture_at_start=device == "cuda"))
    engine.warm_up()
    limit = min(engine.spec.max_seq_len, 1024)
    print(f"\n## {Path(path).name} ({engine.dtype}, limit {engine.spec.max_seq_len} tokens)")
    print("| text tokens | batch tokens | serial ms | serial tok/s | pipelined tok/s | pipelined / full | serial / full |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for length in LENGTHS:
        length = min(length, limit)
        rows = []
        for size in sizes:
            seqs = [np.full(length, 1000 + i, np.int32) for i in range(max(1, size // length))]
            tokens = sum(len(s) for s in seqs)
            pipelined_tps(engine, seqs)  # warm this shape's bucket
            ms = serial_ms(engine, seqs)
            rows.append((tokens, ms, tokens / ms * 1000, pipelined_tps(engine, seqs)))
        full = rows[-1][3]
        for tokens, ms, serial, pipelined in rows:
            print(f"| {length} | {tokens} | {ms:.2f} | {serial:,.0f} | {pipelined:,.0f} | {pipelined / full:.3f} | "
                  f"{serial / full:.3f} |")
    query = [np.full(12, 1000, np.int32)]
    serial_ms(engine, query)
    print(f"\none 12-token query alone: {serial_ms(engine, query):.2f} ms serial")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", required=True, help="comma-separated checkpoint folders")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    args = parser.parse_args()
    for path in args.models.split(","):
        probe(path, args.device, tuple(int(n) for n in args.sizes.split(",")))


if __name__ == "__main__":
    main()
