"""Each retrieval head against the dense pass of its own backbone, the engine alone, in one run; and,
with --http, the same heads served over HTTP to many clients against the engine alone.

Random-weight checkpoints (bench/lib/head_models.py), each loaded by Engine as a server loads it, each run
on the same token ids the way gpu_bench times the engine (bench/lib/head_runs.py): batches cut by the token
budget (and by the rows they pool), launched ahead and read back lazily into one buffer, whole-model CUDA
graphs on a GPU (every bucket warmed and captured before timing), attention auto. The arms (ARMS):

  dense          BERT at --shape: a sentence-transformers embedder, mean pooling       the BERT baseline
  sparse         SPLADE: BertForMaskedLM + SpladePooling (max), calibrated          >= 0.8x of dense
  classifier     BertForSequenceClassification, multi-label                          (no target)
  colbert        PyLate ColBERT: BERT + a 128-wide projection, documents mode,      >= 0.9x of dense
                 one row per kept token
  bge-m3 dense   BGE-M3 on XLM-R large (--m3-shape), no `outputs`: a row per text    the BGE-M3 baseline
  bge-m3 all     the same engine, `outputs` dense, sparse and colbert: a row per     >= 0.8x of bge-m3 dense
                 token, as the server lays out a request that asks for sparse or colbert

A head whose answers are a row per token (colbert, bge-m3) is served with --max-batch-seqs raised to the
token budget (--token-rows-seqs), as docs/colbert.md advises on a GPU: its batches are then cut by tokens,
as the others' are. Reported per arm: tokens/s, the ratio to its baseline, the target, the bytes one text's
answer takes on the device-to-host copy and in each JSON format the server writes (bench/lib/head_answers.py,
over the first --bytes-texts documents), a sparse text's non-zero values. Before a head's speed counts, its
answers on a few real texts are checked against its reference in float32 on the same device
(bench/lib/head_checks.py); a head that fails makes the run exit 1, its report saying which.

--http HEADS (bench/lib/head_http.py): the load generator's many-client pattern (bench/load_gen.py's
http_round, bench/lib/traffic.py) through the real server (`rose-embed serve` with the head's checkpoint),
round after round against the engine alone on the same texts tokenized beforehand; target >= 0.9x. Every
answer that comes back is checked against the engine's for its text.

  python3 bench/heads.py --shape bert-base --device cuda --source .carry/minilm --out bench/results/gpu/heads-bert-base.md
  python3 bench/heads.py --heads none --http sparse,colbert --device cuda --source .carry/minilm \
      --out bench/results/http/http-heads-gpu.md
  python3 bench/heads.py --shape tiny --device cpu --dtype float32 --docs 24 --http sparse,colbert,bge-m3 \
      --http-texts 64 --http-repeat 1 --http-clients 4 --http-procs 1 --http-rounds 2   # a smoke run on a CPU
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rose_embed.engine.contract import m3_rows
from rose_embed.engine.contract.config import EngineConfig
from rose_embed.engine.model_files.loader import resolve_model_dir
from rose_embed.engine.rose.engine import Engine

from bench.gpu_bench import workloads
from bench.lib import head_models
from bench.lib.common import hardware, load_texts, publish
from bench.lib.head_answers import (
    active_dims,
    answer_bytes,
    m3_bytes,
    m3_dense_bytes,
    multi_vector_bytes,
)
from bench.lib.head_checks import (
    HeadMismatch,
    as_answers,
    check_bge_m3,
    check_colbert,
    check_head,
)
from bench.lib.head_runs import (
    answer_rows,
    lay_out,
    per_text,
    rows_per_text,
    run_segmented,
)


@dataclass(frozen=True)
class Arm:
    name: str  # the report's row
    head: str  # the checkpoint it runs (HEADS)
    layout: str  # bench/lib/head_runs.py's LAYOUTS
    baseline: str | None = None  # the arm whose tokens/s it is measured against
    target: float | None = None  # the least ratio to the baseline's tokens/s


HEADS = ("dense", "sparse", "classifier", "colbert", "bge-m3")
ARMS = (Arm("dense", "dense", "text"), Arm("sparse", "sparse", "text", "dense", 0.8),
        Arm("classifier", "classifier", "text", "dense"), Arm("colbert", "colbert", "colbert", "dense", 0.9),
        Arm("bge-m3 dense", "bge-m3", "text"), Arm("bge-m3 all", "bge-m3", "tokens", "bge-m3 dense", 0.8))
TOKEN_ROW_HEADS = ("colbert", "bge-m3")  # a row per token: --token-rows-seqs
CALIBRATION_DOCS = 16


def documents(num_docs: int, doc_tokens: int | None) -> list[np.ndarray]:
    """gpu_bench's documents (lognormal lengths, median 128 tokens, 8 to 512), the first `num_docs`;
    with `doc_tokens`, that many documents of that many random ids each."""
    if doc_tokens is None:
        return workloads(None, None, num_queries=0)["docs"][:num_docs]
    rng = np.random.default_rng(0)
    return [rng.integers(1000, 30000, doc_tokens, dtype=np.int32) for _ in range(num_docs)]


def write_checkpoint(head: str, root: Path, docs: list[np.ndarray], args) -> Path:
    source, out = args.source or resolve_model_dir(None)[0], root / head
    if head == "dense":
        return head_models.write_dense(out, source, args.shape)
    if head == "sparse":
        return head_models.write_sparse(out, source, args.shape, docs[:CALIBRATION_DOCS], args.active_dims,
                                        args.splade_activation, args.device)
    if head == "classifier":
        return head_models.write_classifier(out, source, args.shape, args.labels)
    if head == "colbert":
        return head_models.write_colbert(out, source, args.shape)
    return head_models.write_bge_m3(out, source, args.m3_shape)


def engine_config(head: str, path: Path, args, **extra) -> EngineConfig:
    rows = args.token_rows_seqs if head in TOKEN_ROW_HEADS else args.max_batch_seqs
    return EngineConfig(model=str(path), device=args.device, dtype=args.dtype, max_seq_len=head_models.MAX_SEQ_LENGTH,
                        max_batch_tokens=args.max_batch_tokens, max_batch_seqs=rows, **extra)


def _synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_arm(engine: Engine, seqs, segments, args) -> tuple[float, np.ndarray, dict]:
    """(median seconds of one pass over `seqs`, its answer rows, the graph counters of the timed passes)."""
    runner = engine.runner

    def run(out: np.ndarray | None) -> np.ndarray:
        return run_segmented(runner, seqs, segments, args.max_batch_tokens, engine.config.max_batch_seqs, out)

    landing = run(None)
    # Per bucket and slot: an eager run, then a capture; the timed passes only replay. Without graphs (the
    # CPU) one more pass still: the first passes over new shapes run slower there.
    for _ in range(2 * runner.graphs.num_slots if runner.graphs is not None else 1):
        run(landing)
    before = (runner.num_graph_replays, runner.num_eager_runs, runner.num_capture_failures)
    times: list[float] = []
    while len(times) < args.repeats or sum(times) < args.min_seconds:
        _synchronize(args.device)
        start = time.perf_counter()
        run(landing)
        _synchronize(args.device)
        times.append(time.perf_counter() - start)
    after = (runner.num_graph_replays, runner.num_eager_runs, runner.num_capture_failures)
    counters = dict(zip(("replays", "eager", "capture failures"), (b - a for a, b in zip(before, after))))
    return statistics.median(times), landing, counters


def arm_bytes(arm: Arm, engine: Engine, seqs, segments, rows: np.ndarray, num_texts: int) -> dict[str, float]:
    """The first `num_texts` documents' answers, per format (bench/lib/head_answers.py)."""
    counts = rows_per_text(seqs[:num_texts], None if segments is None else segments[:num_texts])
    texts_rows = per_text(rows[: int(counts.sum())], counts)
    if arm.head == "colbert":  # and a query's, as PyLate encodes it: expanded to query_length vectors
        queries = answer_rows(engine, *engine.colbert.encode(load_texts(8), is_query=True))
        return {**multi_vector_bytes(texts_rows), **{f"query: {name}": size
                                                      for name, size in multi_vector_bytes(queries).items()}}
    if arm.head == "bge-m3":
        m3 = engine.spec.m3
        if arm.layout == "text":
            return m3_dense_bytes(rows[:num_texts], m3.dense_dim)
        return m3_bytes(seqs[:num_texts], texts_rows, m3.dense_dim, m3.colbert_dim, m3.unused_ids)
    return answer_bytes(arm.head, rows[:num_texts])


def check_answers(head: str, engine: Engine, path: Path, texts: list[str], args) -> list:
    """The head's answers to `texts`, as a served batch gives them, checked against its reference."""
    if head == "colbert":
        documents, queries = (answer_rows(engine, *engine.colbert.encode(texts, is_query))
                              for is_query in (False, True))
        return check_colbert(path, texts, documents, queries, args.device, engine.dtype)
    if head == "bge-m3":
        m3, seqs = engine.spec.m3, engine.tokenize(texts)
        texts_rows = answer_rows(engine, seqs, [m3_rows.token_segments(seq) for seq in seqs])
        dense = m3_rows.dense_vectors(np.stack([rows[0] for rows in texts_rows]), m3.dense_dim)
        colbert = [m3_rows.colbert_vectors(rows, m3.colbert_dim) for rows in texts_rows]
        sparse = [m3_rows.lexical_weights(seq, rows, m3.unused_ids) for seq, rows in zip(seqs, texts_rows)]
        return check_bge_m3(path, texts, dense, colbert, sparse, engine.spec.max_seq_len, engine.vocab_size,
                            args.device, engine.dtype)
    rows = np.concatenate(answer_rows(engine, engine.tokenize(texts), None))
    vocab_size = engine.spec.sparse.vocab_size if head == "sparse" else None
    return [check_head(head, str(path), texts, as_answers(head, rows, vocab_size), args.device, engine.dtype)]


def bench_head(head: str, path: Path, docs: list[np.ndarray], texts: list[str], args) -> list[dict]:
    """A row per arm of `head`: its speed, answer sizes and the head's check (a failure on each)."""
    engine = Engine(engine_config(head, path, args))
    if engine.spec.max_seq_len < max(map(len, docs)):  # the runner would cut or refuse them: not the same work
        raise SystemExit(f"{head}: the checkpoint's limit of {engine.spec.max_seq_len} tokens is below the "
                         f"longest document's {max(map(len, docs))}")
    engine.warm_up()
    rows = []
    for arm in (a for a in ARMS if a.head == head):
        seqs, segments = lay_out(arm.layout, engine, docs)
        seconds, landed, counters = time_arm(engine, seqs, segments, args)
        row = {"head": arm.name, "module": type(engine.runner.head).__name__, "baseline": arm.baseline,
               "target": arm.target, "dtype": str(engine.dtype).removeprefix("torch."),
               "num_tokens": sum(len(s) for s in seqs), "seconds": seconds, "counters": counters,
               "width": landed.shape[1], "num_rows": len(landed),
               "answer_bytes": arm_bytes(arm, engine, seqs, segments, landed, min(args.bytes_texts, len(seqs)))}
        if head == "sparse":
            row["active_dims"] = active_dims(landed)
        del landed
        print(f"# {arm.name}: {row['num_tokens'] / seconds:,.0f} tok/s", flush=True)
        rows.append(row)
    try:
        checks, failure = check_answers(head, engine, path, texts, args), None
    except HeadMismatch as exc:
        checks, failure = [], str(exc)
    print(f"# {head}: " + (failure or "; ".join(f"{c.head} {c.metric} error {c.error:.3g} (bar {c.bar:.3g})"
                                                for c in checks)), flush=True)
    for row in rows:
        row["checks"] = checks
        if failure:
            row["failure"] = failure
    del engine
    if args.device.startswith("cuda"):
        torch.cuda.empty_cache()
    return rows


def _heads(value: str) -> tuple[str, ...]:
    names = () if value in ("", "none") else tuple(value.split(","))
    unknown = [n for n in names if n not in HEADS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown head(s) {', '.join(unknown)}; choose from {', '.join(HEADS)}")
    return names


def parse_args(argv: list[str] | None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heads", type=_heads, default=HEADS, help=f"checkpoints timed, the engine alone "
                        f"(default all: {','.join(HEADS)}; none for the HTTP arm alone)")
    parser.add_argument("--shape", choices=sorted(head_models.SHAPES), default="bert-base",
                        help="the BERT heads' shape; tiny: one layer 32 wide, for a smoke run")
    parser.add_argument("--m3-shape", choices=sorted(head_models.M3_SHAPES), default=None,
                        help="BGE-M3's backbone (default xlmr-large, tiny with --shape tiny)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="auto", help="EngineConfig's: auto is bf16 on a GPU")
    parser.add_argument("--docs", type=int, default=4096, help="how many of gpu_bench's documents")
    parser.add_argument("--doc-tokens", type=int, default=None,
                        help="documents of this many tokens each instead of gpu_bench's lengths")
    parser.add_argument("--labels", type=int, default=28, help="the classifier's labels (GoEmotions has 28)")
    parser.add_argument("--active-dims", type=int, default=200,
                        help="non-zero values of the median text the sparse checkpoint is calibrated to")
    parser.add_argument("--splade-activation", choices=["relu", "log1p_relu"], default="relu",
                        help="SpladePooling's: relu is log1p(relu(x)), naver's; log1p_relu takes log1p twice")
    parser.add_argument("--check-texts", type=int, default=8, help="real texts each head is checked on")
    parser.add_argument("--bytes-texts", type=int, default=512, help="documents whose answers are weighed per format")
    parser.add_argument("--max-batch-tokens", type=int, default=EngineConfig.max_batch_tokens)
    parser.add_argument("--max-batch-seqs", type=int, default=EngineConfig.max_batch_seqs)
    parser.add_argument("--token-rows-seqs", type=int, default=None,
                        help="--max-batch-seqs of the heads with a row per token (default: --max-batch-tokens)")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes over the documents, at least")
    parser.add_argument("--min-seconds", type=float, default=1.0,
                        help="and as many more as fill this long: a short pass varies from call to call")
    parser.add_argument("--source", type=Path, default=None,
                        help="tokenizer and sentence-transformers files (default: the embedded model's)")
    http = parser.add_argument_group("the HTTP arm (bench/lib/head_http.py)")
    http.add_argument("--http", type=_heads, default=(), help="heads served over HTTP against the engine alone "
                      "(sparse, colbert, bge-m3; default none)")
    http.add_argument("--http-texts", type=int, default=12061, help="paragraphs of the shared workload per round")
    http.add_argument("--http-repeat", type=int, default=4, help="send the texts this many times per round (long "
                      "enough for a steady window on a GPU, as load_gen's BERT-base rounds)")
    http.add_argument("--http-clients", type=int, default=96, help="connections, spread over --http-procs")
    http.add_argument("--http-procs", type=int, default=8, help="client processes")
    http.add_argument("--http-rounds", type=int, default=3)
    http.add_argument("--http-formats", default="float,base64", help="encoding formats drawn per request")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    from bench.lib.head_http import ROUTES

    if unserved := [head for head in args.http if head not in ROUTES]:
        parser.error(f"--http: no route for {', '.join(unserved)}; choose from {', '.join(ROUTES)}")
    args.argv = sys.argv[1:] if argv is None else argv  # the report's command line, also when called in-process
    args.m3_shape = args.m3_shape or ("tiny" if args.shape == "tiny" else "xlmr-large")
    args.token_rows_seqs = args.token_rows_seqs or args.max_batch_tokens
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from bench.lib.head_http import HTTP_TARGET, bench_http
    from bench.lib.head_report import render

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    docs = documents(args.docs, args.doc_tokens)
    texts = load_texts(args.check_texts)
    print(f"# {args.shape} (BGE-M3: {args.m3_shape}) on {hardware(args.device)}: {len(docs)} documents, "
          f"{sum(map(len, docs)):,} tokens", flush=True)
    rows, http_rows = [], []
    with tempfile.TemporaryDirectory(prefix="heads-") as tmp:
        for head in HEADS:
            if head in args.heads or head in args.http:
                path = write_checkpoint(head, Path(tmp), docs, args)
            if head in args.heads:
                rows += bench_head(head, path, docs, texts, args)
            if head in args.http:
                http_rows.append(bench_http(head, path, engine_config(head, path, args, capture_at_start=True), args))
    publish(render(rows, http_rows, args, len(docs), sum(map(len, docs)), HTTP_TARGET), args.out)
    failed = sorted({r["head"] for r in rows if "failure" in r} | {r["head"] for r in http_rows if r["failures"]})
    if failed:
        print(f"FAILED: {', '.join(failed)} answered wrongly; their speed counts for nothing", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
