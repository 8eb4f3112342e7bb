"""The engine alone with each head on one backbone, in one run: dense, SPLADE sparse, classifier.

Three random-weight checkpoints of one BERT shape (bench/lib/head_models.py: a sentence-transformers
embedder with mean pooling, a SparseEncoder of BertForMaskedLM + SpladePooling with max pooling, a
multi-label BertForSequenceClassification), each loaded by Engine as a server loads it, each run
on the same token ids the way gpu_bench times the engine: ModelRunner's loop, batches cut by the
token budget, launched ahead and read back lazily into one buffer, whole-model CUDA graphs on a
GPU (every bucket warmed and captured before timing), attention auto. Reported per head: tokens/s,
the ratio to the dense pass, the bytes one text's answer takes on the device-to-host copy and in
each JSON format the server writes (bench/lib/head_answers.py), and a sparse text's non-zero
values. Before a head's speed counts, its answers on a few real texts are checked against the
reference library in float32 on the same device (bench/lib/head_checks.py); a head that fails makes
the run exit 1, its report saying which.

Targets (the engine's rate with the head over its dense rate on the same backbone): sparse >= 0.8x.
ColBERT (>= 0.9x) is not on this branch: once engine/model_files has it, add a writer to
bench/lib/head_models.py, its reference to bench/lib/head_checks.py, its formats to
bench/lib/head_answers.py and its name to HEADS and TARGETS here.

  python3 bench/heads.py --shape bert-base --device cuda --source .carry/minilm --out bench/results/gpu/heads-bert-base.md
  python3 bench/heads.py --shape tiny --device cpu --dtype float32 --docs 24   # a smoke run on a CPU
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rose_embed.engine.contract.config import EngineConfig
from rose_embed.engine.model_files.loader import resolve_model_dir
from rose_embed.engine.rose.engine import Engine

from bench.gpu_bench import run_ours, workloads
from bench.lib import head_models
from bench.lib.common import hardware, load_texts, publish
from bench.lib.head_answers import active_dims, answer_bytes
from bench.lib.head_checks import HeadMismatch, as_answers, check_head

HEADS = ("dense", "sparse", "classifier")
TARGETS = {"sparse": 0.8}  # head -> least tokens/s over dense's
CALIBRATION_DOCS = 16


def documents(num_docs: int, doc_tokens: int | None) -> list[np.ndarray]:
    """gpu_bench's documents (lognormal lengths, median 128 tokens, 8 to 512), the first `num_docs`;
    with `doc_tokens`, that many documents of that many random ids each."""
    if doc_tokens is None:
        return workloads(None, None, num_queries=0)["docs"][:num_docs]
    rng = np.random.default_rng(0)
    return [rng.integers(1000, 30000, doc_tokens, dtype=np.int32) for _ in range(num_docs)]


def write_checkpoints(root: Path, docs: list[np.ndarray], args) -> dict[str, Path]:
    source = args.source or resolve_model_dir(None)[0]
    return {"dense": head_models.write_dense(root / "dense", source, args.shape),
            "sparse": head_models.write_sparse(root / "sparse", source, args.shape, docs[:CALIBRATION_DOCS],
                                               args.active_dims, args.splade_activation, args.device),
            "classifier": head_models.write_classifier(root / "classifier", source, args.shape, args.labels)}


def _synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_head(engine: Engine, docs: list[np.ndarray], args) -> tuple[float, np.ndarray, dict]:
    """(median seconds of one pass over `docs`, its answer rows, the graph counters of the timed passes)."""
    runner = engine.runner
    landing = run_ours(runner, docs, args.max_batch_tokens, args.max_batch_seqs)
    # Per bucket and slot: an eager run, then a capture; the timed passes only replay. Without graphs (the
    # CPU) one more pass still: the first passes over new shapes run slower there.
    for _ in range(2 * runner.graphs.num_slots if runner.graphs is not None else 1):
        run_ours(runner, docs, args.max_batch_tokens, args.max_batch_seqs, landing)
    before = (runner.num_graph_replays, runner.num_eager_runs, runner.num_capture_failures)
    times: list[float] = []
    while len(times) < args.repeats or sum(times) < args.min_seconds:
        _synchronize(args.device)
        start = time.perf_counter()
        run_ours(runner, docs, args.max_batch_tokens, args.max_batch_seqs, landing)
        _synchronize(args.device)
        times.append(time.perf_counter() - start)
    after = (runner.num_graph_replays, runner.num_eager_runs, runner.num_capture_failures)
    counters = dict(zip(("replays", "eager", "capture failures"), (b - a for a, b in zip(before, after))))
    return statistics.median(times), landing, counters


def check_answers(head: str, engine: Engine, path: Path, texts: list[str], args):
    """The head's answers to `texts`, run as often as a bucket needs to replay its graph, checked."""
    seqs = engine.tokenize(texts)
    runs = 1 + 2 * (engine.runner.graphs.num_slots if engine.runner.graphs is not None else 0)
    for _ in range(runs):
        rows = engine.execute(seqs).wait()
    vocab_size = engine.spec.sparse.vocab_size if head == "sparse" else None
    return check_head(head, str(path), texts, as_answers(head, rows, vocab_size), args.device, engine.dtype)


def bench_head(head: str, path: Path, docs: list[np.ndarray], texts: list[str], args) -> dict:
    config = EngineConfig(model=str(path), device=args.device, dtype=args.dtype, max_seq_len=head_models.MAX_SEQ_LENGTH,
                          max_batch_tokens=args.max_batch_tokens, max_batch_seqs=args.max_batch_seqs)
    engine = Engine(config)
    if engine.spec.max_seq_len < max(map(len, docs)):  # the runner would cut or refuse them: not the same work
        raise SystemExit(f"{head}: the checkpoint's limit of {engine.spec.max_seq_len} tokens is below the "
                         f"longest document's {max(map(len, docs))}")
    engine.warm_up()
    seconds, rows, counters = time_head(engine, docs, args)
    row = {"head": head, "module": type(engine.runner.head).__name__, "dtype": str(engine.dtype).removeprefix("torch."),
           "num_tokens": sum(len(d) for d in docs), "seconds": seconds, "counters": counters,
           "width": rows.shape[1], "answer_bytes": answer_bytes(head, rows)}
    if head == "sparse":
        row["active_dims"] = active_dims(rows)
    try:
        row["check"] = check_answers(head, engine, path, texts, args)
    except HeadMismatch as exc:
        row["failure"] = str(exc)
    check = row.get("check")
    verdict = f"{check.metric} error {check.error:.3g} (bar {check.bar:.3g})" if check else row["failure"]
    print(f"# {head}: {row['num_tokens'] / seconds:,.0f} tok/s; {verdict}", flush=True)
    del engine
    if args.device.startswith("cuda"):
        torch.cuda.empty_cache()
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(head_models.SHAPES), default="bert-base",
                        help="tiny: one layer 32 wide, for a smoke run")
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
    parser.add_argument("--max-batch-tokens", type=int, default=EngineConfig.max_batch_tokens)
    parser.add_argument("--max-batch-seqs", type=int, default=EngineConfig.max_batch_seqs)
    parser.add_argument("--repeats", type=int, default=3, help="timed passes over the documents, at least")
    parser.add_argument("--min-seconds", type=float, default=1.0,
                        help="and as many more as fill this long: a short pass varies from call to call")
    parser.add_argument("--source", type=Path, default=None,
                        help="tokenizer and sentence-transformers files (default: the embedded model's)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else argv  # the report's command line, also when called in-process
    from bench.lib.head_report import render

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    docs = documents(args.docs, args.doc_tokens)
    texts = load_texts(args.check_texts)
    print(f"# {args.shape} on {hardware(args.device)}: {len(docs)} documents, {sum(map(len, docs)):,} tokens",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="heads-") as tmp:
        paths = write_checkpoints(Path(tmp), docs, args)
        rows = [bench_head(head, paths[head], docs, texts, args) for head in HEADS]
    publish(render(rows, args, len(docs), TARGETS), args.out)
    failed = [r["head"] for r in rows if "failure" in r]
    if failed:
        print(f"FAILED: {', '.join(failed)} answered wrongly; their speed counts for nothing", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
