"""Chunks in, vectors out, with the device kept busy across chunk boundaries.

Reading and tokenizing run one or two chunks ahead in a thread (the Rust tokenizer releases
the GIL). Batches are cut within each chunk by the engine's token budget, as `Engine.embed`
cuts them, and one batch stays in flight while the next is launched, so on CUDA the host's
work between chunks (waiting for the last batch's vectors, handing the chunk to the writer)
overlaps the device's compute.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

import numpy as np

from corpus.source import Chunk
from engine.batch import cut_batches

T = TypeVar("T")
_END = object()


def prefetch(items: Iterable[T], depth: int = 2) -> Iterator[T]:
    """Iterate `items` in a background thread, at most `depth` ahead; its errors are raised here."""
    slots: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(entry) -> bool:
        while not stop.is_set():
            try:
                slots.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put((item, None)):
                    return
            put((_END, None))
        except BaseException as exc:  # handed to the consumer, which re-raises it
            put((_END, exc))

    thread = threading.Thread(target=produce, name="rose-corpus-reader", daemon=True)
    thread.start()
    try:
        while True:
            item, error = slots.get()
            if item is _END:
                if error is not None:
                    raise error
                return
            yield item
    finally:
        stop.set()


def tokenized(engine, chunks: Iterable[Chunk], prompt: str) -> Iterator[tuple[Chunk, list[np.ndarray]]]:
    for chunk in chunks:
        texts = [prompt + text for text in chunk.texts] if prompt else chunk.texts
        _ = chunk.digest  # hashed here, in the reader thread, rather than on the engine's
        yield chunk, engine.tokenize(texts)


def embed_chunks(engine, items: Iterable[tuple[Chunk, list[np.ndarray]]],
                 on_batch: Callable[[int], object] = lambda num_texts: None) -> Iterator[tuple[Chunk, np.ndarray]]:
    """Yield (chunk, vectors [len(chunk), dim] float32) in order, as each chunk's last batch lands;
    `on_batch` hears of every batch as it lands (the progress bar moves per batch, not per chunk)."""
    in_flight = None  # (chunk, its batch results so far, its number of batches, LazyResult)
    for chunk, seqs in items:
        ranges = cut_batches([len(s) for s in seqs], engine.config.max_batch_tokens, engine.config.max_batch_seqs)
        parts: list[np.ndarray] = []
        for lo, hi in ranges:
            launched = (chunk, parts, len(ranges), engine.execute(seqs[lo:hi]))
            if in_flight is not None and (done := _land(*in_flight, on_batch)) is not None:
                yield done
            in_flight = launched
    if in_flight is not None and (done := _land(*in_flight, on_batch)) is not None:
        yield done


def _land(chunk: Chunk, parts: list[np.ndarray], num_batches: int, result,
          on_batch: Callable[[int], object]) -> tuple[Chunk, np.ndarray] | None:
    """Collect one batch's vectors; the chunk and all its vectors once this was its last batch."""
    parts.append(result.wait())
    on_batch(len(parts[-1]))
    if len(parts) < num_batches:
        return None
    return chunk, np.concatenate(parts)  # one contiguous array per chunk, as the part file stores it
