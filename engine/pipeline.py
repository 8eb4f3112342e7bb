"""Texts in, vectors out, with tokenization running in threads ahead of the device.

The one loop behind `Engine.embed` and the corpus job. Texts come as items (one list, or a
corpus's chunks); a pool of threads tokenizes them in pieces, several pieces ahead of the
device (the Rust tokenizer releases the GIL while it encodes), so that the pieces after
batch i are tokenized while batch i computes. Batches are cut by the engine's budget within
each item, across its pieces, greedily as `cut_batches` cuts a list: an item gets the
batches it would get tokenized at once, whatever came before it (so a resumed corpus job
computes its chunks as an uninterrupted one did). Batches are launched a few ahead of the
one read back; each item's vectors are handed out, in order, as soon as its last batch lands.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from engine.batch import PackedBatch, batch_ranges, join_packed, slice_packed
from engine.lazy import LazyResult
from engine.prefetch import close_iterator, prefetch

T = TypeVar("T")

# Texts per tokenizer call: small enough that several pieces make one batch (the threads
# share its tokenization), large enough that a call's fixed cost stays negligible.
PIECE_TEXTS = 256
# Batches launched and not yet read back. Two, as the server's batcher keeps: the device has
# the next batch queued while the host, which shares the GIL with the tokenizer threads,
# reads one back and cuts the one after.
MAX_IN_FLIGHT = 2


def default_num_threads() -> int:
    return max(1, min(4, os.cpu_count() or 1))


@dataclass(frozen=True)
class _Item:
    tag: Any
    num_texts: int


def embed_texts(engine, texts: Sequence[str], *, num_threads: int | None = None, piece_texts: int = PIECE_TEXTS,
                max_in_flight: int = MAX_IN_FLIGHT) -> np.ndarray:
    """texts -> [N, dim] float32, through `embed_stream`; texts that make one piece are
    tokenized in the caller's thread (nothing to overlap: a query pays for no thread)."""
    if len(texts) <= piece_texts:
        num_threads = 0
    [(_, vectors)] = embed_stream(engine, [(None, texts)], num_threads=num_threads, piece_texts=piece_texts,
                                  max_in_flight=max_in_flight)
    return vectors


def embed_stream(engine, items: Iterable[tuple[T, Sequence[str]]],
                 on_batch: Callable[[int], object] = lambda num_texts: None, *,
                 num_threads: int | None = None, piece_texts: int = PIECE_TEXTS,
                 max_in_flight: int = MAX_IN_FLIGHT) -> Iterator[tuple[T, np.ndarray]]:
    """Yield (tag, vectors [len(texts), dim] float32) per item of (tag, texts), in order.

    `engine` gives `tokenizer.encode_packed`, `execute_packed`, `config.max_batch_tokens`,
    `config.max_batch_seqs` and `dimensions`. `items` is iterated in a thread of its own, and
    pieces tokenized by `num_threads` more (default `default_num_threads()`; 0: all of it in
    the caller's thread, one piece after another).
    `on_batch` hears of every batch as it lands, with its number of texts. An error of the
    tokenizer or of `items` is raised here, in the caller, once the items before it are out;
    one of the device at once. Closing the generator (or an exception, Ctrl-C included)
    stops the threads: no piece is tokenized after it, beyond those already running.
    """
    num_threads = default_num_threads() if num_threads is None else num_threads
    pool = ThreadPoolExecutor(num_threads, thread_name_prefix="rose-tokenizer") if num_threads > 0 else None
    tokenize = engine.tokenizer.encode_packed
    if pool is None:
        ahead = _submitted(items, _run_now, tokenize, piece_texts)
    else:
        ahead = prefetch(_submitted(items, pool.submit, tokenize, piece_texts), depth=2 * num_threads,
                         name="rose-embed-feeder")
    launcher = _Launcher(engine, on_batch, max_in_flight)
    try:
        while True:
            try:
                entry = next(ahead, None)
                tokens = entry.result() if isinstance(entry, Future) else None
            except Exception:
                yield from launcher.flush()  # the items before the failure are whole: they go out first
                raise
            if entry is None:
                break
            if tokens is None:
                yield from launcher.expect(entry)
            else:
                yield from launcher.add(tokens)
        yield from launcher.flush()
    finally:
        ahead.close()
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


def _submitted(items: Iterable[tuple[Any, Sequence[str]]], submit: Callable[..., Future],
               tokenize: Callable[[Sequence[str]], PackedBatch], piece_texts: int) -> Iterator[_Item | Future]:
    """Each item's announcement, then its pieces' tokenization, started (submitted) as they are reached."""
    iterator = iter(items)
    try:
        for tag, texts in iterator:
            yield _Item(tag, len(texts))
            for lo in range(0, len(texts), piece_texts):
                yield submit(tokenize, texts[lo : lo + piece_texts])
    finally:
        close_iterator(iterator)


def _run_now(fn: Callable, *args) -> Future:
    """`fn(*args)` run here, as a finished future: its result or its error."""
    future: Future = Future()
    try:
        future.set_result(fn(*args))
    except Exception as exc:  # raised where the future is read, as a pool's would be
        future.set_exception(exc)
    return future


class _Launcher:
    """Cuts batches from tokenized pieces and keeps up to `max_in_flight` of them in flight. Its
    steps yield each item's vectors as soon as they have all landed, in order: an item is
    handed out (a corpus chunk committed) before the next batch is launched."""

    def __init__(self, engine, on_batch: Callable[[int], object], max_in_flight: int):
        self._execute: Callable[[PackedBatch], LazyResult] = engine.execute_packed
        self._max_tokens, self._max_seqs = engine.config.max_batch_tokens, engine.config.max_batch_seqs
        self._dimensions = engine.dimensions
        self._on_batch = on_batch
        self._held: PackedBatch | None = None  # the item's last batch so far, which its next piece may fill
        self._in_flight: deque[LazyResult] = deque()
        self._max_in_flight = max(1, max_in_flight)
        self._items: deque[_Item] = deque()  # items announced and not yet handed out
        self._landed: deque[np.ndarray] = deque()  # landed batches' vectors not yet handed out
        self._num_landed = 0

    def expect(self, item: _Item) -> Iterator[tuple[Any, np.ndarray]]:
        """A new item begins: what is held belongs to the one before, and no batch spans two."""
        yield from self._launch_held()
        self._items.append(item)
        yield from self._finished()  # an empty item, where all before it are out

    def add(self, tokens: PackedBatch) -> Iterator[tuple[Any, np.ndarray]]:
        if self._held is not None:
            tokens = join_packed(self._held, tokens)  # less than a batch: a small copy
            self._held = None
        ranges = batch_ranges(tokens.cu_seqlens, self._max_tokens, self._max_seqs)
        for lo, hi in ranges[:-1]:
            yield from self._launch(slice_packed(tokens, lo, hi))
        lo, hi = ranges[-1]
        last = slice_packed(tokens, lo, hi)
        if hi - lo >= self._max_seqs or last.num_tokens >= self._max_tokens:
            yield from self._launch(last)  # full: no next text could join it
        else:
            self._held = last

    def flush(self) -> Iterator[tuple[Any, np.ndarray]]:
        """The input has ended: launch what is held and land everything."""
        yield from self._launch_held()
        while self._in_flight:
            self._land(self._in_flight.popleft())
        yield from self._finished()

    def _launch_held(self) -> Iterator[tuple[Any, np.ndarray]]:
        if self._held is not None:
            held, self._held = self._held, None
            yield from self._launch(held)

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
        while self._items and self._items[0].num_texts <= self._num_landed:
            item = self._items.popleft()
            yield item.tag, self._take(item.num_texts)

    def _take(self, num_rows: int) -> np.ndarray:
        """The next item's vectors (its batches': none spans two items), as one array of their own."""
        parts, taken = [], 0
        while taken < num_rows:
            parts.append(self._landed.popleft())
            taken += len(parts[-1])
        self._num_landed -= taken
        return np.concatenate(parts) if parts else np.zeros((0, self._dimensions), np.float32)
