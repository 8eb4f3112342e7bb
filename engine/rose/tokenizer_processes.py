"""Tokenizer copies in spawned processes, for the pipeline (engine/rose/pipeline.py).

The ASCII WordPiece fast path (engine/text/ascii_wordpiece.py) encodes in Python and holds the
GIL, so tokenizer threads run one at a time: on a GPU that outpaces one core's
tokenization, `Engine.embed` waits for it. Copies of the tokenizer in processes of their own
run side by side. A piece goes out as its texts and comes back packed (a few arrays); the
workers import neither torch nor the model.

One pool per tokenizer and size is kept for the life of the process, since spawning the
workers costs far more than a call of `Engine.embed` on a few thousand texts.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import threading
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from rose_embed.engine.rose.pieces import Piece, tokenize_piece
from rose_embed.engine.text.tokenizer import TextTokenizer

# Below this many cores, processes would take the cores the device's host side needs.
_MIN_CORES = 4
_MAX_PROCESSES = 8

_pools: dict[tuple, ProcessPoolExecutor] = {}
_pools_lock = threading.Lock()
_worker_tokenizer: TextTokenizer | None = None


def default_num_processes(tokenizer: TextTokenizer, device_type: str) -> int:
    """Processes for a device that computes apart from the host (a GPU) where the tokenizer
    holds the GIL and the machine has the cores; 0 (threads suffice) otherwise."""
    cores = len(os.sched_getaffinity(0))
    if device_type == "cpu" or not tokenizer.holds_the_gil or cores < _MIN_CORES:
        return 0
    return min(_MAX_PROCESSES, cores // 2)


class Submitter:
    """Starts one stream's pieces in the pool of `num_processes` copies of `tokenizer` (started
    on first use): `submitter(texts, first)` -> Future[Piece]. `cancel_pending` cancels the
    pieces not yet started, when the stream stops early."""

    def __init__(self, tokenizer: TextTokenizer, num_processes: int, prompt: str, long_inputs: str):
        self._key = (tokenizer.recipe, num_processes)
        self._prompt, self._long_inputs = prompt, long_inputs
        self._sent: deque[Future] = deque()

    def __call__(self, texts: Sequence[str], first: int) -> Future:
        args = (_tokenize_here, list(texts), first, self._prompt, self._long_inputs)
        try:
            future = _pool(self._key).submit(*args)
        except BrokenProcessPool:  # a worker died (its pieces failed with this error): a new pool
            with _pools_lock:
                _pools.pop(self._key, None)
            future = _pool(self._key).submit(*args)
        while self._sent and self._sent[0].done():
            self._sent.popleft()
        self._sent.append(future)
        return future

    def cancel_pending(self) -> None:
        for future in self._sent:
            future.cancel()


def _pool(key: tuple) -> ProcessPoolExecutor:
    with _pools_lock:
        pool = _pools.get(key)
        if pool is None:
            recipe, num_processes = key
            pool = ProcessPoolExecutor(num_processes, mp_context=multiprocessing.get_context("spawn"),
                                       initializer=_load_tokenizer, initargs=(recipe,))
            _pools[key] = pool
        return pool


def close_all() -> None:
    """Stop every pool's workers (at exit, or where a test wants none left)."""
    with _pools_lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        pool.shutdown(wait=True, cancel_futures=True)


atexit.register(close_all)


def _load_tokenizer(recipe: tuple) -> None:
    global _worker_tokenizer
    _worker_tokenizer = TextTokenizer(*recipe)


def _tokenize_here(texts: list[str], first: int, prompt: str, long_inputs: str) -> Piece:
    return tokenize_piece(_worker_tokenizer, texts, first, prompt, long_inputs)
