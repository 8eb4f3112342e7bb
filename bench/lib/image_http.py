"""bench/images.py's HTTP arm: a CLIP checkpoint served by the real server, with its default flags, to many
clients sending base64 images, against the engine alone on the same preprocessed images, round after round.

The images are photo-like (bench/lib/photos.py), --http-distinct of them at --http-size, each encoded once as
a file of one of --http-formats, before any timing; a round sends --http-images of them, the distinct ones
over and over, as /v1/embeddings `image_url` items with base64 data: URIs, in requests of 1 to
--http-request-images images. The traffic is the load generator's many-client pattern (bench/load_gen.py's
http_round over bench/lib/traffic.py's plan and lean clients): --http-clients connections in --http-procs
spawned processes, all started at one instant, the rate read in the steady window (every client busy) from
what was answered inside it, a request lost below HTTP a failure like a non-200.

The engine alone runs in this process with the server's model, device and dtype, on the same images
preprocessed beforehand (engine/image/preprocess.py, as the front ends do it), in the batches the queue cuts
by default: the device's own speed on this work, decoding, resizing and HTTP excluded. Each round times both,
in turn (rotated, so that neither always runs first); a round's ratio is the HTTP steady window's images/s over
the engine's, and the target reads the median of the rounds'. Every answer is checked against the engine's
vector for its image (cosine, the bar of bench/images.py's check for the dtype).

Decoding and resizing happen in the server's front ends: their CPU (bench/lib/server_cpu.py), beside the
engines', the server's other processes' and the whole machine's, is read over each steady window, and the
clients report their own. The front ends' CPU per image says how many cores the engine's rate would take.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import statistics
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.lib.common import ServerProcess
from bench.lib.photos import encoded_file, image_item, photo
from bench.lib.server_cpu import ServerCpu
from bench.lib.traffic import make_plan, run_worker

HTTP_TARGET = 0.8  # the least HTTP images/s over the engine alone's


@dataclass(frozen=True)
class Repeated(Sequence):
    """`length` items, the distinct ones over and over: what a round sends, pickled to the client processes
    as the distinct ones alone."""

    items: tuple
    length: int

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, key):
        if isinstance(key, slice):
            return [self.items[i % len(self.items)] for i in range(*key.indices(self.length))]
        if not -self.length <= key < self.length:
            raise IndexError(f"item {key} of {self.length}")
        return self.items[key % self.length % len(self.items)]


def server_flags(path: Path, device: str) -> list[str]:
    """The server as users start it: only the model, and the CPU where the run is on it."""
    return [*(["--devices", "cpu"] if device == "cpu" else []), "--model", str(path)]


def make_images(engine, args) -> tuple[list[bytes], list[str], np.ndarray]:
    """The distinct images' files, their formats, and their pixels as the front ends make them."""
    from PIL import Image
    from rose_embed.engine.image.preprocess import preprocess

    width, height = args.http_size
    files, formats = [], []
    for i in range(args.http_distinct):
        image_format = args.http_formats[i % len(args.http_formats)]
        files.append(encoded_file(photo(i, width, height), image_format))
        formats.append(image_format)
    pixels = np.stack([preprocess(Image.open(io.BytesIO(data)), engine.spec.clip.image)
                       for data in files])
    return files, formats, pixels


def bench_http(shape: str, path: Path, args) -> dict:
    """One shape's HTTP rounds against the engine alone: the report's row (bench/lib/image_http_report.py)."""
    from rose_embed.engine.contract.config import EngineConfig
    from rose_embed.engine.rose.engine import Engine

    from bench.images import MIN_COSINE, engine_pass, timed
    from bench.load_gen import ROUND_START_DELAY, http_round

    engine = Engine(EngineConfig(model=str(path), device=args.device, capture_at_start=True))
    engine.warm_up()
    files, formats, distinct = make_images(engine, args)
    count = args.http_images
    pixels = distinct[np.arange(count) % len(distinct)]
    config, seq_len = engine.config, engine.spec.clip.image_seq_len
    batch = min(count, config.max_batch_seqs, config.max_batch_tokens // seq_len)
    batches = [pixels[lo: lo + batch] for lo in range(0, count, batch)]
    expected = engine_pass(engine, batches)  # also the engine's warm-up on exactly these batches
    items = Repeated(tuple(image_item(data, f) for data, f in zip(files, formats)), count)
    plan = make_plan(count, args.http_request_images, 0, tuple(args.http_answer_formats.split(",")))
    image_prefix = np.arange(count + 1)  # the window counts images as the load generator counts tokens
    min_cosine = MIN_COSINE[engine.dtype]
    row = {"shape": shape, "dtype": str(engine.dtype).removeprefix("torch."), "images": count, "batch": batch,
           "engine_seconds": [], "window_rates": [], "round_rates": [], "cpu": [], "client_shares": [],
           "failures": [], "checked": 0, "mismatches": 0, "worst": 1.0, "flags": server_flags(path, args.device),
           "min_cosine": min_cosine, "cores": os.cpu_count(),
           "file_bytes": {f: statistics.mean(len(d) for d, g in zip(files, formats) if g == f) for f in set(formats)}}
    server = ServerProcess(*row["flags"])
    try:
        with ProcessPoolExecutor(args.http_procs, mp_context=multiprocessing.get_context("spawn")) as pool, \
                ServerCpu(server.url, server.proc.pid) as server_cpu:
            row["front_ends"] = server_cpu.num_front_ends
            list(pool.map(time.sleep, [0.1] * args.http_procs))  # the workers started before any timing
            warm = run_worker(server.url, items, plan[:16], 8, None, 0.0, dim=engine.dimensions)
            row["failures"] += warm.errors
            for r in range(args.http_rounds):
                for step in ("engine", "http")[r % 2:] + ("engine", "http")[:r % 2]:
                    if step == "engine":
                        row["engine_seconds"].append(timed(lambda: engine_pass(engine, batches), args.device))
                        continue
                    called = time.monotonic()
                    measured = http_round(pool, args.http_procs, server.url, items, plan, args.http_clients, None,
                                          image_prefix, dim=engine.dimensions)
                    _check(measured, expected, min_cosine, row)
                    counted = measured.window_seconds > 0
                    row["window_rates"].append(measured.window_tokens / measured.window_seconds if counted else None)
                    row["round_rates"].append(count / measured.seconds)
                    time.sleep(2 * server_cpu.interval)  # a sample after the window closed
                    sent = called + ROUND_START_DELAY  # when http_round's clients start
                    row["cpu"].append(server_cpu.cores(*(measured.window_bounds if counted else
                                                         (sent, sent + measured.seconds))))
                    row["client_shares"] += measured.client_shares
                print(f"# {shape} over HTTP, round {r}: engine {count / row['engine_seconds'][-1]:,.1f} images/s, "
                      f"HTTP {row['window_rates'][-1] or row['round_rates'][-1]:,.1f}; front ends "
                      f"{row['cpu'][-1]['front ends']:.2f} cores", flush=True)
    finally:
        server.stop()
    return row  # the engine goes with this frame, before the next shape's is built


def _check(measured, expected: np.ndarray, min_cosine: float, row: dict) -> None:
    from bench.lib.common import cosine_rows

    row["failures"] += measured.errors
    if sorted(measured.indices.tolist()) != list(range(len(expected))):
        row["failures"].append(f"{len(measured.indices)} answers came back for {len(expected)} images")
    if not len(measured.indices):
        return
    cosines = cosine_rows(measured.vectors, expected[measured.indices])
    off = int((~(cosines >= min_cosine)).sum())  # NaN counts as off
    row["checked"] += len(cosines)
    row["mismatches"] += off
    row["worst"] = min(row["worst"], float(np.nanmin(cosines)) if not np.isnan(cosines).all() else float("nan"))
    if off:
        row["failures"].append(f"{off} answers of a round off the engine's (cosine < {min_cosine})")


def ratios(row: dict) -> tuple[list[float], str]:
    """Per round, the HTTP rate over the engine's, and what it read: the steady window where every round had
    one, else the whole round."""
    engine_rates = [row["images"] / s for s in row["engine_seconds"]]
    windows = row["window_rates"]
    if windows and all(rate is not None for rate in windows):
        return [w / e for w, e in zip(windows, engine_rates)], "steady window"
    return [h / e for h, e in zip(row["round_rates"], engine_rates)], "whole round"
