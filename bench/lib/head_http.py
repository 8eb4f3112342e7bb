"""bench/heads.py's HTTP arm: a retrieval head served by the real server to many clients, against the engine
alone on the same texts, round after round.

The traffic is the load generator's many-client pattern (bench/load_gen.py's http_round over
bench/lib/traffic.py's plan and lean clients): requests of 1 to 64 paragraphs of the shared workload, their
formats drawn per request, sent by --http-clients connections in --http-procs spawned processes. Each head
goes where its clients send it (ROUTES): a SPLADE model's texts to TEI's /embed_sparse, a ColBERT model's to
/v1/embeddings as documents, BGE-M3's to /v1/embeddings with all three `outputs`.

The engine alone runs in this process with the server's model, device, dtype and batch caps, on the same
texts tokenized beforehand and laid out as the server lays them out (bench/lib/head_runs.py): the device's
own speed on this work, tokenizer and HTTP excluded. Each round times both, in turn (rotated, so that
neither always runs first); a round's ratio is the HTTP steady window's tokens/s (every client busy,
bench/lib/traffic.py's `steady_window`) over the engine's, and the target reads the median of the rounds'.
Every answer that comes back is checked against the engine's for its text: the lowest cosine over its
parts (a sparse answer compared over the union of both answers' token ids, a token vector with the vector
of the same token) must reach 0.999 (0.9999 in float32), and a ColBERT answer must hold as many vectors.
"""

from __future__ import annotations

import multiprocessing
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from rose_embed.engine.contract import m3_rows
from rose_embed.engine.contract.sparse_rows import read_rows

from bench.lib.common import DEFAULT_DATA, ServerProcess, build_texts
from bench.lib.head_runs import per_text, rows_per_text, run_segmented
from bench.lib.traffic import Route, make_plan, run_worker

HTTP_TARGET = 0.9  # the least HTTP tokens/s over the engine alone's
MAX_REQUEST_TEXTS = 64
ROUTES = {
    "sparse": Route(path="/embed_sparse", input_field="inputs", fields=(("truncate", True),), answer="tei_sparse",
                    has_formats=False),
    "colbert": Route(fields=(("input_type", "document"),), answer="multi_vector"),
    "bge-m3": Route(fields=(("outputs", ("dense", "sparse", "colbert")),), answer="multi_output"),
}


def _layout(head: str, engine, texts: list[str]) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
    """The texts' ids and segments, as the server's front ends hand them to its engines."""
    if head == "colbert":
        return engine.colbert.encode(texts, is_query=False)
    seqs = engine.tokenize(texts)
    return seqs, ([m3_rows.token_segments(seq) for seq in seqs] if head == "bge-m3" else None)


def _expected(head: str, engine, seqs: list[np.ndarray], rows: np.ndarray, counts: np.ndarray) -> list:
    """Each text's answer as the server would write it, from the engine's rows."""
    if head == "sparse":
        return [(row.indices, row.values) for row in read_rows(rows)]
    texts_rows = per_text(rows, counts)
    if head == "colbert":
        return texts_rows
    m3 = engine.spec.m3
    return [(m3_rows.dense_vectors(r[:1], m3.dense_dim)[0], m3_rows.lexical_weights(seq, r, m3.unused_ids),
             m3_rows.colbert_vectors(r, m3.colbert_dim)) for seq, r in zip(seqs, texts_rows)]


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    norms = float(np.linalg.norm(a) * np.linalg.norm(b))
    if norms == 0:  # an answer of zeros matches only another
        return float(not a.any() and not b.any())
    return float(a @ b) / norms


def _sparse_cosine(got: tuple[np.ndarray, np.ndarray], want: tuple[np.ndarray, np.ndarray]) -> float:
    ids = np.union1d(got[0], want[0])
    spread = np.zeros((2, len(ids)))
    for row, (indices, values) in zip(spread, (got, want)):
        row[np.searchsorted(ids, indices)] = values
    return _cosine(*spread) if len(ids) else 1.0


def _rows_cosine(got: np.ndarray, want: np.ndarray) -> float:
    """The lowest cosine of a text's token vectors with the engine's, -1 where their counts differ."""
    if got.shape != want.shape:
        return -1.0
    if not len(got):
        return 1.0
    dots = (got * want).sum(1) / np.maximum(np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1), 1e-30)
    return float(dots.min())


def answer_cosine(head: str, got, want) -> float:
    """The lowest cosine over an answer's parts against the engine's answer for its text."""
    if head == "sparse":
        return _sparse_cosine(got, want)
    if head == "colbert":
        return _rows_cosine(got, want)
    return min(_cosine(got[0].astype(np.float64), want[0].astype(np.float64)), _sparse_cosine(got[1], want[1]),
               _rows_cosine(got[2], want[2]))


def fitting_texts(engine, num_texts: int, repeat: int) -> list[str]:
    """The workload's first paragraphs that the model takes whole (an over-long one would be cut by rules that
    differ from route to route), `repeat` times over."""
    texts = build_texts(DEFAULT_DATA, num_texts, 1)
    limit = engine.spec.max_seq_len
    return [t for t, ids in zip(texts, engine.tokenize(texts)) if len(ids) < limit] * repeat


def server_flags(config, path: Path) -> list[str]:
    devices = ["--devices", "cpu"] if config.device == "cpu" else []
    return [*devices, "--model", str(path), "--dtype", config.dtype, "--max-batch-tokens", str(config.max_batch_tokens),
            "--max-batch-seqs", str(config.max_batch_seqs), "--max-seq-len", str(config.max_seq_len)]


def bench_http(head: str, path: Path, config, args) -> dict:
    """One head's HTTP rounds against the engine alone: the report's row (bench/lib/head_report.py)."""
    import torch
    from rose_embed.engine.rose.engine import Engine

    from bench.load_gen import http_round

    route = ROUTES[head]
    engine = Engine(config)
    engine.warm_up()
    texts = fitting_texts(engine, args.http_texts, args.http_repeat)
    seqs, segments = _layout(head, engine, texts)
    counts = rows_per_text(seqs, segments)
    token_prefix = np.concatenate([[0], np.cumsum([len(s) for s in seqs])])
    num_tokens = int(token_prefix[-1])
    dim = engine.spec.m3.colbert_dim if head == "bge-m3" else engine.dimensions
    plan = make_plan(len(texts), MAX_REQUEST_TEXTS, 0, tuple(args.http_formats.split(",")))
    min_cosine = 0.9999 if engine.dtype == torch.float32 else 0.999

    def time_engine(out: np.ndarray | None) -> tuple[float, np.ndarray]:
        if config.device.startswith("cuda"):
            torch.cuda.synchronize()
        started = time.perf_counter()
        out = run_segmented(engine.runner, seqs, segments, config.max_batch_tokens, config.max_batch_seqs, out)
        return time.perf_counter() - started, out  # the last rows landed: the device is done

    _, landing = time_engine(None)  # also the engine's warm-up on exactly these shapes
    expected = _expected(head, engine, seqs, landing, counts)
    row = {"head": head, "route": route.path, "num_texts": len(texts), "num_tokens": num_tokens,
           "engine_seconds": [], "http_seconds": [], "window_rates": [], "client_shares": [], "failures": [],
           "checked": 0, "mismatches": 0, "worst": 1.0, "flags": server_flags(config, path)}
    server = ServerProcess(*row["flags"])
    try:
        with ProcessPoolExecutor(args.http_procs, mp_context=multiprocessing.get_context("spawn")) as pool:
            list(pool.map(time.sleep, [0.1] * args.http_procs))  # the workers started before any timing
            warm = run_worker(server.url, texts, plan[:8], 4, None, 0.0, route, dim)  # the server's first requests
            row["failures"] += warm.errors
            for r in range(args.http_rounds):
                for step in ("engine", "http")[r % 2:] + ("engine", "http")[:r % 2]:
                    if step == "engine":
                        row["engine_seconds"].append(time_engine(landing)[0])
                        continue
                    measured = http_round(pool, args.http_procs, server.url, texts, plan, args.http_clients, None,
                                          token_prefix, route, dim)
                    _check(head, measured, expected, min_cosine, row)
                    row["http_seconds"].append(measured.seconds)
                    row["window_rates"].append(measured.window_tokens / measured.window_seconds
                                               if measured.window_seconds > 0 else None)
                    row["client_shares"] += measured.client_shares
                print(f"# {head} over HTTP, round {r}: engine {row['engine_seconds'][-1]:.2f} s, "
                      f"HTTP {row['http_seconds'][-1]:.2f} s", flush=True)
    finally:
        server.stop()
    row["min_cosine"] = min_cosine
    return row  # the engine goes with this frame, before the next head's is built


def _check(head: str, measured, expected: list, min_cosine: float, row: dict) -> None:
    row["failures"] += measured.errors
    if sorted(measured.indices.tolist()) != list(range(len(expected))):
        row["failures"].append(f"{len(measured.indices)} answers came back for {len(expected)} texts")
    cosines = [answer_cosine(head, got, expected[index]) for index, got in zip(measured.indices.tolist(),
                                                                                measured.vectors)]
    off = sum(not cosine >= min_cosine for cosine in cosines)  # NaN counts as off
    row["checked"] += len(cosines)
    row["mismatches"] += off
    row["worst"] = min([row["worst"], *cosines])
    if off:
        row["failures"].append(f"{off} answers of a round off the engine's (cosine < {min_cosine})")


def ratios(row: dict) -> tuple[list[float], str]:
    """Per round, the HTTP rate over the engine's, and what it read: the steady window where every round had
    one, else the whole round."""
    engine_rates = [row["num_tokens"] / s for s in row["engine_seconds"]]
    if row["window_rates"] and all(rate is not None for rate in row["window_rates"]):
        return [w / e for w, e in zip(row["window_rates"], engine_rates)], "steady window"
    return [row["num_tokens"] / h / e for h, e in zip(row["http_seconds"], engine_rates)], "whole round"


def median_rate(row: dict, key: str) -> float:
    return row["num_tokens"] / statistics.median(row[key])
