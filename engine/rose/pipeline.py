"""Texts in, vectors out, with tokenization running in threads ahead of the device.

The one loop behind `Engine.embed` and the corpus job. Texts come as items (one list, or a
corpus's chunks); a pool of threads tokenizes them in pieces, several pieces ahead of the
device (the Rust tokenizer releases the GIL while it encodes; a tokenizer that encodes in
Python gets processes instead, where the device is a GPU and the cores are there), so that
the pieces after batch i are tokenized while batch i computes. Batches are cut by the
engine's budget within each item, across its pieces, greedily as `cut_batches` cuts a
list: an item gets the batches it would get tokenized at once, whatever came before it (so
a resumed corpus job computes its chunks as an uninterrupted one did). Batches are launched
a few ahead of the one read back; each item's vectors are handed out, in order, as soon as
its last batch lands.
Texts over the model's limit are truncated, refused or cut into windows as `long_inputs`
says (engine/text/long_inputs.py), piece by piece in the tokenizer threads. With `late_chunking`,
each text is a document given as its chunks, and each chunk gets a vector read in the
context of its document (engine/text/late_chunking.py): an item's vectors are then one per chunk.
"""

from __future__ import annotations

import itertools
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

import numpy as np

from rose_embed.engine.rose import tokenizer_processes
from rose_embed.engine.contract.batch import PackedBatch, batch_ranges, join_packed, pack, slice_packed
from rose_embed.engine.text.late_chunking import ChunkTooLongError, EmptyChunkError, LateChunkedDocuments, fit_documents
from rose_embed.engine.rose.lazy import LazyResult
from rose_embed.engine.text.long_inputs import FittedInputs
from rose_embed.engine.rose.pieces import Piece, tokenize_piece
from rose_embed.engine.rose.prefetch import close_iterator, prefetch

T = TypeVar("T")

# Texts per tokenizer call: small enough that several pieces make one batch (the threads
# share its tokenization), large enough that a call's fixed cost stays negligible.
PIECE_TEXTS = 256
# Texts per piece sent to tokenizer processes once each has had its first: a piece's trip
# through the process pool costs this process far more CPU than the piece's own pickling, and
# about the same whatever its size, so larger pieces leave this process free to drive the
# device. The first pieces keep the small size, so that the device starts as soon.
PROCESS_PIECE_TEXTS = 1024
# Batches launched and not yet read back. Two, as one front end keeps on a GPU: the device has
# the next batch queued while the host, which shares the GIL with the tokenizer threads,
# reads one back and cuts the one after (on a CPU a batch is done when it is launched).
MAX_IN_FLIGHT = 2
# Text, in characters, below which `embed_texts` keeps to threads: the tokenizer processes take
# a second or so to start, about what one thread takes to tokenize this much.
PROCESSES_MIN_CHARS = 2_000_000


def default_num_threads() -> int:
    return max(1, min(4, os.cpu_count() or 1))


@dataclass(frozen=True)
class _Item:
    tag: Any
    num_texts: int


def refuse_non_embedder(engine) -> None:
    """ValueError for a reranker, a classifier or a sparse encoder: its rows are scores of (query, document)
    pairs, a text's label probabilities or its packed (token id, weight) pairs, never a text's vector."""
    if engine.spec.kind == "rerank":
        raise ValueError(f"{engine.spec.name} is a reranker: it scores (query, document) pairs (serve it and "
                         "send them to POST /v1/rerank), and embeds no texts")
    if engine.spec.kind == "classify":
        raise ValueError(f"{engine.spec.name} is a classifier: it gives each text's label probabilities (serve it "
                         "and send them to POST /classify), and embeds no texts")
    if engine.spec.sparse is not None:
        raise ValueError(f"{engine.spec.name} is a sparse encoder: it gives each text's (token id, weight) pairs, "
                         "not dense vectors (serve it and send its texts to POST /embed_sparse or /v1/embeddings)")
    if engine.spec.colbert is not None:
        raise ValueError(f"{engine.spec.name} is a multi-vector (ColBERT) model: it gives one vector per token of a "
                         "query or a document, not one per text (serve it and send its texts to POST /v1/embeddings)")
    if engine.spec.m3 is not None:
        raise ValueError(f"{engine.spec.name} is a BGE-M3 model: its rows hold its dense, multi-vector and sparse "
                         "outputs side by side (serve it and send its texts to POST /v1/embeddings)")


def embed_texts(engine, texts: Sequence[str], *, num_threads: int | None = None,
                num_processes: int | None = None, piece_texts: int = PIECE_TEXTS,
                process_piece_texts: int = PROCESS_PIECE_TEXTS, max_in_flight: int = MAX_IN_FLIGHT) -> np.ndarray:
    """texts -> [N, dim] float32, through `embed_stream`; texts that make one piece are
    tokenized in the caller's thread (nothing to overlap: a query pays for no thread), and
    tokenizer processes are started only for a list long enough to repay their start."""
    if len(texts) <= piece_texts:
        num_threads = num_processes = 0
    elif num_processes is None and sum(map(len, texts)) < PROCESSES_MIN_CHARS:
        num_processes = 0
    [(_, vectors)] = embed_stream(engine, [(None, texts)], num_threads=num_threads, num_processes=num_processes,
                                  piece_texts=piece_texts, process_piece_texts=process_piece_texts,
                                  max_in_flight=max_in_flight)
    return vectors


def embed_stream(engine, items: Iterable[tuple[T, Sequence[str]]],
                 on_batch: Callable[[int], object] = lambda num_seqs: None, *, prompt: str = "",
                 long_inputs: str = "truncate", late_chunking: bool = False, num_threads: int | None = None,
                 num_processes: int | None = None, piece_texts: int = PIECE_TEXTS,
                 process_piece_texts: int = PROCESS_PIECE_TEXTS,
                 max_in_flight: int = MAX_IN_FLIGHT) -> Iterator[tuple[T, np.ndarray]]:
    """Yield (tag, vectors [len(texts), dim] float32) per item of (tag, texts), in order.

    With `late_chunking`, every text is a document as a list of its chunks (strings), and an
    item's vectors are one per chunk, [its chunks, dim], documents in order; `long_inputs`
    then says what becomes of a chunk too long for a window by itself (ChunkTooLongError in
    "error" mode, its `document` counting the documents of every item before).

    `engine` gives `tokenizer`, `device`, `execute_packed`, `config.max_batch_tokens`,
    `config.max_batch_seqs`, `dimensions` and `spec.normalize`. Every text is embedded as
    `prompt + text`; `long_inputs` is "truncate", "error" (InputTooLongError, its index
    counting the texts of every item before) or "chunk". `items` is iterated in a thread of
    its own, and pieces (of `piece_texts` texts; to tokenizer processes, `process_piece_texts`
    once each has had one) tokenized by `num_threads` more (default `default_num_threads()`; 0:
    all of it in the caller's thread, one piece after another), or, where `num_processes` >
    0, by that many tokenizer processes instead (engine/rose/tokenizer_processes.py; by default
    where the tokenizer holds the GIL and the device is not the CPU; never for late chunking).

    `on_batch` hears of every batch as it lands, with its number of sequences, and of each
    item as it goes out, with its number of texts less its sequences (0 unless texts were
    cut into windows): the counts add up to the texts handed out. An error of the tokenizer
    or of `items` is raised here, in the caller, once the items before it are out; one of
    the device at once. Closing the generator (or an exception, Ctrl-C included) stops the
    threads: no piece is tokenized after it, beyond those already running.
    """
    refuse_non_embedder(engine)
    num_threads = default_num_threads() if num_threads is None else num_threads
    if late_chunking:
        num_processes = 0
    elif num_processes is None:
        num_processes = tokenizer_processes.default_num_processes(engine.tokenizer, engine.device.type)

    def tokenize(texts: Sequence, first: int) -> Piece:
        if late_chunking:
            return _tokenize_documents(engine, texts, first, prompt, long_inputs)
        return tokenize_piece(engine.tokenizer, texts, first, prompt, long_inputs)

    # How each piece's tokenization starts, how many work on them, and what stops the rest.
    if num_processes:
        start = tokenizer_processes.Submitter(engine.tokenizer, num_processes, prompt, long_inputs)
        workers, stop = num_processes, start.cancel_pending
    elif num_threads:
        pool = ThreadPoolExecutor(num_threads, thread_name_prefix="rose-tokenizer")
        start, workers = partial(pool.submit, tokenize), num_threads
        stop = partial(pool.shutdown, wait=False, cancel_futures=True)
    else:
        start, workers, stop = partial(_run_now, tokenize), 0, (lambda: None)
    ahead = _submitted(items, start, _piece_sizes(piece_texts, process_piece_texts, num_processes))
    if workers:
        ahead = prefetch(ahead, depth=2 * workers, name="rose-embed-feeder")
    launcher = _Launcher(engine, on_batch, max_in_flight)
    try:
        while True:
            try:
                entry = next(ahead, None)
                piece = entry.result() if isinstance(entry, Future) else None
            except Exception:
                yield from launcher.flush()  # the items before the failure are whole: they go out first
                raise
            if entry is None:
                break
            if piece is None:
                yield from launcher.expect(entry)
            else:
                yield from launcher.add(piece)
        yield from launcher.flush()
    finally:
        ahead.close()
        stop()


def _piece_sizes(piece_texts: int, process_piece_texts: int, num_processes: int) -> Iterator[int]:
    """Texts per piece, piece after piece of the stream: `piece_texts`, and with tokenizer
    processes, once each has had one, `process_piece_texts` where that is larger."""
    if not num_processes:
        return itertools.repeat(piece_texts)
    return itertools.chain(itertools.repeat(piece_texts, num_processes),
                           itertools.repeat(max(piece_texts, process_piece_texts)))


def _submitted(items: Iterable[tuple[Any, Sequence[str]]], start: Callable[[Sequence[str], int], Future],
               piece_sizes: Iterator[int]) -> Iterator[_Item | Future]:
    """Each item's announcement, then its pieces' tokenization, started as they are reached; a
    piece knows where its first text stands in the stream (for an error's index)."""
    iterator, num_before = iter(items), 0
    try:
        for tag, texts in iterator:
            yield _Item(tag, len(texts))
            lo = 0
            while lo < len(texts):
                hi = lo + next(piece_sizes)
                yield start(texts[lo:hi], num_before + lo)
                lo = hi
            num_before += len(texts)
    finally:
        close_iterator(iterator)


def _tokenize_documents(engine, documents: Sequence[list[str]], first: int, prompt: str, long_inputs: str) -> Piece:
    """One piece of late-chunked documents, in a tokenizer thread: their windows, chunks as segments."""
    try:
        fitted = fit_documents(engine.tokenizer, long_inputs, list(documents), prompt, engine.config.max_batch_seqs)
    except ChunkTooLongError as exc:
        raise ChunkTooLongError(first + exc.document, exc.chunk, exc.num_tokens, exc.max_seq_len) from None
    except EmptyChunkError as exc:
        raise EmptyChunkError(first + exc.document, exc.chunk) from None
    return Piece(pack(fitted.seqs, fitted.segments), fitted)


def _run_now(fn: Callable, *args) -> Future:
    """`fn(*args)` run here, as a finished future: its result or its error."""
    future: Future = Future()
    try:
        future.set_result(fn(*args))
    except Exception as exc:  # raised where the future is read, as a pool's would be
        future.set_exception(exc)
    return future


@dataclass
class _Pending:
    """An item whose vectors are not all out: its pieces' numbers of vectors pooled and fittings."""

    tag: Any
    num_texts: int
    pieces: list[tuple[int, FittedInputs | LateChunkedDocuments | None]] = field(default_factory=list)
    num_texts_in: int = 0  # texts of the pieces in so far

    @property
    def is_whole(self) -> bool:
        return self.num_texts_in == self.num_texts

    @property
    def num_outputs(self) -> int:
        return sum(num_outputs for num_outputs, _ in self.pieces)


class _Launcher:
    """Cuts batches from tokenized pieces and keeps up to `max_in_flight` of them in flight. Its
    steps yield each item's vectors as soon as they have all landed, in order: an item is
    handed out (a corpus chunk committed) before the next batch is launched."""

    def __init__(self, engine, on_batch: Callable[[int], object], max_in_flight: int):
        self._engine = engine
        self._execute: Callable[[PackedBatch], LazyResult] = engine.execute_packed
        self._max_tokens, self._max_seqs = engine.config.max_batch_tokens, engine.config.max_batch_seqs
        self._on_batch = on_batch
        self._held: PackedBatch | None = None  # the item's last batch so far, which its next piece may fill
        self._in_flight: deque[LazyResult] = deque()
        self._max_in_flight = max(1, max_in_flight)
        self._items: deque[_Pending] = deque()  # items announced and not yet handed out
        self._landed: deque[np.ndarray] = deque()  # landed batches' vectors not yet handed out
        self._num_landed = 0

    def expect(self, item: _Item) -> Iterator[tuple[Any, np.ndarray]]:
        self._items.append(_Pending(item.tag, item.num_texts))
        yield from self._finished()  # an empty item goes out at once, after those before it

    def add(self, piece: Piece) -> Iterator[tuple[Any, np.ndarray]]:
        """The current item's next piece. Its last batch is held for the piece after, unless it
        is full or the item's last: no batch spans two items."""
        item = self._items[-1]
        item.pieces.append((piece.batch.num_outputs, piece.fitted))
        item.num_texts_in += piece.num_texts
        tokens = piece.batch
        if self._held is not None:
            tokens = join_packed(self._held, tokens)  # less than a batch: a small copy
            self._held = None
        ranges = batch_ranges(tokens.cu_seqlens, self._max_tokens, self._max_seqs, tokens.cu_segments)
        for lo, hi in ranges[:-1]:
            yield from self._launch(slice_packed(tokens, lo, hi))
        lo, hi = ranges[-1]
        last = slice_packed(tokens, lo, hi)
        if item.is_whole or last.num_outputs >= self._max_seqs or last.num_tokens >= self._max_tokens:
            yield from self._launch(last)
        else:
            self._held = last

    def flush(self) -> Iterator[tuple[Any, np.ndarray]]:
        """The input has ended, or failed: land what is in flight; the whole items go out (what
        is held belongs to an item that failed)."""
        while self._in_flight:
            self._land(self._in_flight.popleft())
        yield from self._finished()

    def _launch(self, batch: PackedBatch) -> Iterator[tuple[Any, np.ndarray]]:
        self._in_flight.append(self._execute(batch))
        if len(self._in_flight) > self._max_in_flight:
            self._land(self._in_flight.popleft())
            yield from self._finished()

    def _land(self, result: LazyResult) -> None:
        vectors = result.wait()
        self._landed.append(vectors)
        self._num_landed += len(vectors)
        self._on_batch(len(vectors))

    def _finished(self) -> Iterator[tuple[Any, np.ndarray]]:
        while self._items and self._items[0].is_whole and self._items[0].num_outputs <= self._num_landed:
            item = self._items.popleft()
            vectors = self._vectors_of(item)
            if item.num_outputs != item.num_texts:
                # windows (or chunks) were counted as they landed: texts now
                self._on_batch(item.num_texts - item.num_outputs)
            yield item.tag, vectors

    def _vectors_of(self, item: _Pending) -> np.ndarray:
        """The item's vectors, one per text (or chunk), as one array of their own (no batch spans two items)."""
        parts, taken = [], 0
        while taken < item.num_outputs:
            parts.append(self._landed.popleft())
            taken += len(parts[-1])
        self._num_landed -= taken
        if not parts:
            return np.zeros((0, self._engine.dimensions), np.float32)
        vectors = np.concatenate(parts)
        if all(fitted is None for _, fitted in item.pieces):
            return vectors
        combined, start = [], 0
        for num_outputs, fitted in item.pieces:
            piece = vectors[start : start + num_outputs]
            combined.append(piece if fitted is None else fitted.combine(piece, self._engine.spec.normalize))
            start += num_outputs
        return np.concatenate(combined)
