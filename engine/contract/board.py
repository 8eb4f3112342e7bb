"""The engine's board: what one engine process reports of itself, in shared memory.

The engine writes it as it works; every front end reads it whenever it likes (to route a
piece to the least-loaded engine, to tell a stuck engine, for /health and /metrics), so
that each sees the whole picture of the engine, not only its own share. One float64 per
field; a reader may see a field one update old, never a torn one.
"""

from __future__ import annotations

import time
from multiprocessing import shared_memory

import numpy as np

from rose_embed.engine.contract.shared_blocks import attach_block, close_block, create_block

# The batch sizes the engine counts in its histograms (upper bounds; the last bucket is +Inf).
TOKEN_BUCKETS = tuple(2**i for i in range(4, 17))  # 16 .. 65536
SEQ_BUCKETS = tuple(2**i for i in range(0, 12))  # 1 .. 2048

_FIELDS = (
    "heartbeat",  # time.monotonic() of the engine's latest sign of life (a batch done, or idle)
    "busy_since",  # time.monotonic() when the batch now on the device started; 0: idle
    "queued_tokens", "queued_pieces", "queued_requests",  # waiting in the queue, not yet in a batch
    "tokens_per_second",  # recent throughput, idle time included, for /metrics
    "busy_tokens_per_second",  # the device's speed while it computes, over its recent batches, for Retry-After
    "batches", "sequences", "tokens", "compute_seconds",  # batches run, and what they held
    "batches_failed", "pieces_cancelled",
    "express_batches",  # batches of small requests run between another batch's layers (engine/queue/express_lane.py)
    "graph_replays", "eager_runs", "capture_failures",
    "device_allocated", "device_reserved",  # bytes, on CUDA
    "token_sum", "seq_sum",
    "longest_batch",  # seconds, the longest batch run: the watchdog's bound grows with it (server/links/stall_watch.py)
)
_INDEX = {name: i for i, name in enumerate(_FIELDS)}
_TOKEN_COUNTS = len(_FIELDS)
_SEQ_COUNTS = _TOKEN_COUNTS + len(TOKEN_BUCKETS) + 1
_SIZE = _SEQ_COUNTS + len(SEQ_BUCKETS) + 1


class EngineBoard:
    """`create` where the engine is started (it is unlinked there), `attach` everywhere else."""

    def __init__(self, shm: shared_memory.SharedMemory, owner: bool):
        self.shm, self._owner = shm, owner
        self._values = np.ndarray((_SIZE,), np.float64, shm.buf)

    @classmethod
    def create(cls) -> EngineBoard:
        board = cls(create_block(_SIZE * 8), owner=True)
        board._values[:] = 0.0
        return board

    @classmethod
    def attach(cls, name: str) -> EngineBoard:
        return cls(attach_block(name), owner=False)

    @property
    def name(self) -> str:
        return self.shm.name

    def __getitem__(self, field: str) -> float:
        return float(self._values[_INDEX[field]])

    def __setitem__(self, field: str, value: float) -> None:
        self._values[_INDEX[field]] = value

    def add(self, field: str, value: float) -> None:
        self._values[_INDEX[field]] += value

    def record_batch(self, num_tokens: int, num_seqs: int, seconds: float) -> None:
        """One batch run: the counters and both histograms."""
        values = self._values
        values[_INDEX["heartbeat"]] = time.monotonic()
        values[_INDEX["longest_batch"]] = max(values[_INDEX["longest_batch"]], seconds)
        values[_INDEX["batches"]] += 1
        values[_INDEX["tokens"]] += num_tokens
        values[_INDEX["sequences"]] += num_seqs
        values[_INDEX["compute_seconds"]] += seconds
        values[_INDEX["token_sum"]] += num_tokens
        values[_INDEX["seq_sum"]] += num_seqs
        values[_TOKEN_COUNTS + _bucket(num_tokens, TOKEN_BUCKETS)] += 1
        values[_SEQ_COUNTS + _bucket(num_seqs, SEQ_BUCKETS)] += 1

    def histogram(self, kind: str) -> tuple[list[tuple[str, float]], float]:
        """("tokens" or "sequences"): cumulative (upper bound, count) pairs, Prometheus's way, and the sum."""
        buckets, first, total = ((TOKEN_BUCKETS, _TOKEN_COUNTS, "token_sum") if kind == "tokens"
                                 else (SEQ_BUCKETS, _SEQ_COUNTS, "seq_sum"))
        counts = np.cumsum(self._values[first : first + len(buckets) + 1])
        bounds = [str(float(b)) for b in buckets] + ["+Inf"]
        return list(zip(bounds, counts.tolist())), self[total]

    def snapshot(self) -> dict[str, float]:
        return {name: float(self._values[i]) for name, i in _INDEX.items()}

    def close(self) -> None:
        self._values = None  # the view must go before the mapping can close
        close_block(self.shm, self._owner)


def _bucket(value: int, bounds: tuple[int, ...]) -> int:
    for i, bound in enumerate(bounds):
        if value <= bound:
            return i
    return len(bounds)
