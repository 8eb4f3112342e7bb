"""Engine.embed on texts against the engine alone on the same texts' ids, one run.

    python bench/embed_pipeline.py                                  # the embedded MiniLM, CPU or GPU
    python bench/embed_pipeline.py --model /models/bert-base --device cuda --docs 4
    python bench/embed_pipeline.py --tiny                           # a 1-layer random BERT: the tokenizer side alone

Per round, on the same texts and the same batches:
  text (pipeline)  `Engine.embed(texts)`: tokenized in threads while the device computes;
  ids (engine)     the texts' ids tokenized beforehand; only the batches are timed (packed and
                   launched, as many in flight as the pipeline keeps): the engine alone;
  text (serial)    the loop `Engine.embed` ran before: tokenize all, then compute, one in flight.
Then `Engine.embed`'s loop with each of `--threads` tokenizer threads and each of
`--processes` tokenizer processes (and the default processes fed the `--process-pieces`
sizes), and tokenization alone: in each of the numbers of processes, every piece sent at
once, and in a pool of each of the thread counts (pieces of the pipeline's size). Needs no network: the model is a directory
(`--model`), the embedded default, or `--tiny` (written to a temporary folder).
`--simulated-rate` puts a stand-in device of that speed, which takes no CPU, behind the
model's tokenizer: whether this machine's host side can feed a GPU that fast.

Results in bench/results/:
  embed-pipeline-gpu-minilm.md  python bench/embed_pipeline.py --model /tmp/minilm-random --device cuda --rounds 5
                                    --threads 0 --processes 4,8 --process-pieces 256   (bench/gpu_session.sh engine)
  embed-pipeline-simulated-6M-processes.md
                                python bench/embed_pipeline.py --simulated-rate 6e6 --num-texts 16000 --rounds 5
                                    --threads 0,2 --processes 2
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import tempfile
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib.common import load_texts, machine_description, publish  # noqa: E402
from rose_embed.engine.rose.cublas_workspace import give_cublas_no_workspace  # noqa: E402
from rose_embed.engine.contract.batch import PackedBatch, cut_batches, pack  # noqa: E402
from rose_embed.engine.contract.config import EngineConfig  # noqa: E402
from rose_embed.engine.rose.engine import Engine  # noqa: E402
from rose_embed.engine.rose.pipeline import MAX_IN_FLIGHT, PIECE_TEXTS, PROCESS_PIECE_TEXTS, default_num_threads, embed_texts  # noqa: E402
from rose_embed.engine.rose.tokenizer_processes import Submitter, default_num_processes  # noqa: E402


def workload(num_texts: int, docs: int) -> list[str]:
    """The shared paragraphs in file order, cycled past the file's end; `docs` > 1 joins that many
    consecutive paragraphs into one document."""
    needed = num_texts * max(1, docs)
    paragraphs = load_texts(needed)
    cycled = [paragraphs[i % len(paragraphs)] for i in range(needed)]
    if docs <= 1:
        return cycled
    return ["\n\n".join(cycled[i : i + docs]) for i in range(0, needed, docs)]


class SimulatedDevice:
    """The engine's tokenizer and budget before a stand-in device: a batch takes num_tokens / rate
    seconds, queued behind those before it, and no CPU (as a GPU's compute takes none); its
    vectors are zeros. Shows whether this machine's tokenizer side can feed a device that fast."""

    def __init__(self, engine: Engine, tokens_per_s: float):
        self._engine, self._tokens_per_s, self._free_at = engine, tokens_per_s, 0.0

    def __getattr__(self, name: str):
        return getattr(self._engine, name)

    def execute(self, seqs: list[np.ndarray]) -> _Done:
        return self.execute_packed(pack(seqs))

    def execute_packed(self, batch: PackedBatch) -> _Done:
        self._free_at = max(time.perf_counter(), self._free_at) + batch.num_tokens / self._tokens_per_s
        return _Done(self._free_at, batch.num_seqs, self._engine.dimensions)


class _Done:
    def __init__(self, at: float, num_seqs: int, dimensions: int):
        self._at, self._shape = at, (num_seqs, dimensions)

    def wait(self) -> np.ndarray:
        time.sleep(max(0.0, self._at - time.perf_counter()))
        return np.zeros(self._shape, np.float32)


def serial_embed(engine: Engine, texts: list[str]) -> np.ndarray:
    """What Engine.embed did before the pipeline: all texts tokenized first, then the batches,
    one in flight."""
    return run_ids(engine, engine.tokenize(texts), max_in_flight=1)


def run_ids(engine: Engine, seqs: list[np.ndarray], max_in_flight: int = MAX_IN_FLIGHT) -> np.ndarray:
    """The engine alone: given ids, cut, pack and launch, reading a batch back once
    `max_in_flight` more are launched (as many as the pipeline keeps)."""
    out, in_flight = [], deque()
    for lo, hi in cut_batches([len(s) for s in seqs], engine.config.max_batch_tokens, engine.config.max_batch_seqs):
        in_flight.append(engine.execute(seqs[lo:hi]))
        if len(in_flight) > max_in_flight:
            out.append(in_flight.popleft().wait())
    out += [result.wait() for result in in_flight]
    return np.concatenate(out)


def tokenize_in_processes(engine: Engine, texts: list[str], num_processes: int, piece_texts: int) -> int:
    """The tokenizer processes alone: every piece submitted at once, the tokens counted as they
    come back (how fast the processes tokenize, with nothing else for this process to do)."""
    submit = Submitter(engine.tokenizer, num_processes, "", "truncate")
    futures = [submit(texts[lo : lo + piece_texts], lo) for lo in range(0, len(texts), piece_texts)]
    return sum(future.result().batch.num_tokens for future in futures)


def tokenize_only(engine: Engine, texts: list[str], num_threads: int) -> int:
    """The pipeline's tokenizer side: pieces encoded to packed streams by a pool (0 threads: one
    piece after another in this thread); returns the number of tokens."""
    pieces = [texts[lo : lo + PIECE_TEXTS] for lo in range(0, len(texts), PIECE_TEXTS)]
    if num_threads == 0:
        return sum(engine.tokenizer.encode_packed(piece).num_tokens for piece in pieces)
    with ThreadPoolExecutor(num_threads) as pool:
        return sum(batch.num_tokens for batch in pool.map(engine.tokenizer.encode_packed, pieces))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="model directory (default: the embedded all-MiniLM-L6-v2)")
    parser.add_argument("--tiny", action="store_true", help="a 1-layer, 32-wide random BERT with the default tokenizer")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--num-texts", type=int, default=None,
                        help="default 2000 on a CPU, 50000 on a GPU (where 2000 texts take milliseconds, and "
                             "tokenizing the first batch before the device can start weighs on the figure)")
    parser.add_argument("--docs", type=int, default=1, help="paragraphs per text (1: paragraphs; 4: documents)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-batch-tokens", type=int, default=16384)
    parser.add_argument("--threads", default="0,1,2,4",
                        help="tokenizer thread counts to sweep (0: tokenized in the caller's thread, piece by piece)")
    parser.add_argument("--processes", default="2,4",
                        help="tokenizer process counts to sweep (engine/rose/tokenizer_processes.py; their start is "
                             "left out of the timing by a first untimed run, as a long-lived engine's pool is)")
    parser.add_argument("--process-pieces", default="",
                        help="texts per piece sent to tokenizer processes after each one's first (default "
                             f"{PROCESS_PIECE_TEXTS}), other sizes to compare, with the default number of processes")
    parser.add_argument("--torch-threads", type=int, default=None,
                        help="torch's threads on a CPU (default: torch's own; 1 keeps a tiny model's many small "
                             "parallel regions from stalling on a busy machine)")
    parser.add_argument("--simulated-rate", type=float, default=None, metavar="TOKENS_PER_S",
                        help="replace the model's compute by a device of this speed that takes no CPU (the "
                             "tokenizer side alone, against a GPU of that speed)")
    parser.add_argument("--out", type=Path, default=None, help="write the markdown report here")
    args = parser.parse_args()
    give_cublas_no_workspace()  # as the server's engine processes run

    with tempfile.TemporaryDirectory() as tmp:
        model = args.model
        if args.tiny:
            from bench.tiny_model import write_tiny_bert

            model = str(write_tiny_bert(Path(tmp) / "tiny-bert"))
        engine = Engine(EngineConfig(model=model, device=args.device, max_batch_tokens=args.max_batch_tokens,
                                     num_threads=args.torch_threads))
        report = measure(engine if args.simulated_rate is None else SimulatedDevice(engine, args.simulated_rate), args)
    publish(report, args.out)


def measure(engine: Engine | SimulatedDevice, args) -> str:
    texts = workload(args.num_texts or (2000 if engine.device.type == "cpu" else 50_000), args.docs)
    seqs = engine.tokenize(texts)
    num_tokens = sum(len(s) for s in seqs)
    engine.warm_up()
    reference = serial_embed(engine, texts)  # also warms every shape these batches take (graphs captured)
    run_ids(engine, seqs)

    thread_counts = [int(n) for n in args.threads.split(",") if n]
    process_counts = [int(n) for n in args.processes.split(",") if n]
    default_processes = default_num_processes(engine.tokenizer, engine.device.type)
    default_label = (f"{default_processes} tokenizer processes" if default_processes
                     else f"{default_num_threads()} threads")
    paths = {
        # embed_texts(engine, ...) is what Engine.embed runs; a SimulatedDevice has no Engine.embed of its own.
        f"text (pipeline, default: {default_label})": lambda: embed_texts(engine, texts),
        "ids (engine alone)": lambda: run_ids(engine, seqs),
        "text (serial: tokenize all, then compute)": lambda: serial_embed(engine, texts),
    }
    for num_threads in thread_counts:
        paths[f"text (pipeline, {num_threads} threads)"] = (
            lambda n=num_threads: embed_texts(engine, texts, num_threads=n, num_processes=0))
    for num_processes in process_counts:
        paths[f"text (pipeline, {num_processes} tokenizer processes)"] = (
            lambda n=num_processes: embed_texts(engine, texts, num_processes=n))
        # Its pool started, every process of it (the pool starts one per piece that finds none idle).
        embed_texts(engine, texts[: num_processes * PIECE_TEXTS], num_processes=num_processes)
    if default_processes:
        embed_texts(engine, texts[: default_processes * PIECE_TEXTS], num_processes=default_processes)
    for size in [int(n) for n in args.process_pieces.split(",") if n] if default_processes else []:
        paths[f"text (pipeline, {default_processes} tokenizer processes, pieces of {size} texts)"] = (
            lambda n=size: embed_texts(engine, texts, num_processes=default_processes, process_piece_texts=n))
    for num_processes in process_counts:
        paths[f"tokenize only, {num_processes} processes, pieces of {PROCESS_PIECE_TEXTS}"] = (
            lambda n=num_processes: tokenize_in_processes(engine, texts, n, PROCESS_PIECE_TEXTS))
    for num_threads in thread_counts:
        paths[f"tokenize only, {num_threads} threads"] = lambda n=num_threads: tokenize_only(engine, texts, n)
    paths["tokenize only, one call on the whole list (the serial path's)"] = lambda: engine.tokenize(texts)

    # Round by round, every path in turn, each round starting one path later: a busy machine
    # slows them all alike, and no path always runs first or right after another.
    seconds: dict[str, list[float]] = {label: [] for label in paths}
    # This process's own CPU (the tokenizer processes' excluded): with processes, what bounds the
    # text path at a fast device's speed is this process's work per piece, not theirs.
    cpu_seconds: dict[str, list[float]] = {label: [] for label in paths}
    outputs: dict[str, object] = {}
    labels = list(paths)
    for round_index in range(args.rounds):
        shift = round_index % len(labels)
        for label in labels[shift:] + labels[:shift]:
            start, cpu_start = time.perf_counter(), time.process_time()
            outputs[label] = paths[label]()
            seconds[label].append(time.perf_counter() - start)
            cpu_seconds[label].append(time.process_time() - cpu_start)
    median = {label: statistics.median(v) for label, v in seconds.items()}
    best = {label: min(v) for label, v in seconds.items()}
    pipeline, ids, serial = list(paths)[:3]
    same = np.array_equal(outputs[pipeline], outputs[serial])
    max_diff = float(np.abs(outputs[pipeline] - reference).max())

    name = engine.spec.path.name if args.tiny or args.model else "all-MiniLM-L6-v2 (embedded)"
    if args.simulated_rate is not None:
        name += f" tokenizer, simulated device at {args.simulated_rate / 1e6:g}M tokens/s"
    workload_name = "paragraphs" if args.docs <= 1 else f"documents of {args.docs} paragraphs"
    command = " ".join(["python bench/embed_pipeline.py", *sys.argv[1:]])
    lines = [
        "# Engine.embed: texts through the pipeline vs ids through the engine alone",
        "",
        f"- command: `{command}`",
        f"- machine: {machine_description()}; device "
        f"{'simulated' if args.simulated_rate else engine.device}, {str(engine.dtype).removeprefix('torch.')}",
        f"- date: {datetime.date.today().isoformat()}",
        f"- model: {name}; workload: {len(texts)} {workload_name} of stdlib_docstrings.jsonl "
        f"({num_tokens} tokens after truncation), max_batch_tokens {engine.config.max_batch_tokens}; "
        f"{args.rounds} rounds, each running every path in turn (from a different one); the best round as "
        "well as the median, since on a shared machine the best is the one least slowed by others",
        "- pipeline vs serial vectors: not compared (the simulated device gives zeros)" if args.simulated_rate else
        f"- pipeline vs serial vectors: {'identical' if same else 'DIFFERENT'}; "
        f"max |pipeline - first serial run| {max_diff:.2e}",
        "",
        "| path | median s | texts/s | tokens/s | x ids | best s | tokens/s | x ids | this process's CPU s, median |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for label, s in median.items():
        lines.append(f"| {label} | {s:.4f} | {len(texts) / s:,.0f} | {num_tokens / s:,.0f} | {median[ids] / s:.2f} | "
                     f"{best[label]:.4f} | {num_tokens / best[label]:,.0f} | {best[ids] / best[label]:.2f} | "
                     f"{statistics.median(cpu_seconds[label]):.4f} |")
    device = f"simulated:{args.simulated_rate:g}" if args.simulated_rate else engine.device
    summary = (f"SUMMARY model={name.split()[0]} device={device} texts={len(texts)} tokens={num_tokens} "
               f"pipeline={num_tokens / median[pipeline] / 1e6:.3f}M tok/s ids={num_tokens / median[ids] / 1e6:.3f}M "
               f"tok/s serial={num_tokens / median[serial] / 1e6:.3f}M tok/s "
               f"pipeline/ids={median[ids] / median[pipeline]:.2f} serial/ids={median[ids] / median[serial]:.2f} "
               f"(best rounds: {best[ids] / best[pipeline]:.2f}, {best[ids] / best[serial]:.2f}) "
               f"identical={'n/a' if args.simulated_rate else same}")
    return "\n".join(lines + ["", summary]) + "\n"


if __name__ == "__main__":
    main()
