"""attention_backend "auto" on CUDA: the fastest backend per class of batch, chosen by timing at warm-up.

No backend wins everywhere: varlen (FlashAttention-2) gives every sequence its own query
tiles, which is right for long texts and wasteful for many short ones; the packed kernel
(engine/rose/attention/packed.py) shares tiles between short sequences but reads both
sides of a tile that straddles two long ones. So the engine times each candidate and
keeps the fastest per class.

A class is a CUDA graph's (token bucket, max_seqlen bucket) (engine/rose/graphs.py). The
max_seqlen bucket is what separates a batch of short texts (longest <= 128) from one of
long texts in the same token bucket, and it is exactly the axis on which the candidates
differ, so one choice per token bucket alone would have to pick between them blind.
Each class is timed on one batch that fills its token bucket with lengths spread
log-uniformly from 8 up to the class's longest (`representative_lengths`), padded the way
real batches of that class are: a mix of the short and long texts the class admits.

Only the attention is timed (engine/rose/attention/timing.py), each candidate as a small CUDA
graph of a few calls: the rest of the model runs the same kernels whichever backend is
chosen. The choice is fixed once warm-up is over, so every graph of a class runs one
backend, and its eager warm-up run and its replays run the same kernels.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from rose_embed.engine.rose.graphs import MIN_SEQLEN_BUCKET

logger = logging.getLogger("rose_embed.engine")

# Another backend replaces the default only when it is this much faster: timings of a few
# graph replays vary by a percent or two, and the default is the one every test runs.
MARGIN = 0.03
# Warm-up must stay short: classes not timed within this budget keep the default.
SELECTION_BUDGET_S = 30.0


@dataclass(frozen=True)
class ChosenMeta:
    backend: object  # the backend that prepared `meta` and runs the forward
    meta: object


class AutoAttentionBackend:
    """Delegates each batch to the backend chosen for its class; the first candidate is the
    default (eager runs, classes not timed). Candidates accept the model's shape already."""

    name = "auto"

    def __init__(self, candidates: list):
        self.candidates = {backend.name: backend for backend in candidates}
        self.default = candidates[0]
        self.shape = self.default.shape
        self.table: dict[tuple[int, int], str] = {}  # (token bucket, max_seqlen bucket) -> name
        self.timings: dict[tuple[int, int], dict[str, float]] = {}  # seconds per call, for the log
        self.num_graph_slots = max(getattr(b, "num_graph_slots", 1) for b in candidates)

    def backend_for(self, num_tokens: int, max_seqlen: int):
        return self.candidates[self.table.get((num_tokens, max_seqlen), self.default.name)]

    def slots_for(self, num_tokens: int, max_seqlen: int) -> int:
        return getattr(self.backend_for(num_tokens, max_seqlen), "num_graph_slots", 1)

    def prepare(self, cu_seqlens, cu_seqlens_host: list[int], max_seqlen: int) -> ChosenMeta:
        return ChosenMeta(self.default, self.default.prepare(cu_seqlens, cu_seqlens_host, max_seqlen))

    def prepare_graph(self, key, cu_seqlens, cu_seqlens_host: list[int], max_seqlen: int) -> ChosenMeta:
        backend = self.backend_for(key.num_tokens, key.max_seqlen)
        return ChosenMeta(backend, backend.prepare_graph(key, cu_seqlens, cu_seqlens_host, max_seqlen))

    def forward(self, q, k, v, meta: ChosenMeta, local: bool = False, position_bias=None):
        return meta.backend.forward(q, k, v, meta.meta, local=local, position_bias=position_bias)

    def choose(self, classes: list[tuple[int, int]], time_one: Callable[[object, int, int], float],
               budget_s: float = SELECTION_BUDGET_S, clock: Callable[[], float] = time.perf_counter) -> None:
        """Time every candidate on every class (`time_one(backend, num_tokens, max_seqlen)` ->
        seconds per call) and keep the fastest. A candidate that fails is dropped for good."""
        started = clock()
        for num_tokens, max_seqlen in classes:
            if clock() - started > budget_s:
                logger.warning("attention backend choice: %.0f s budget spent; the %s classes left keep %s",
                               budget_s, len(classes) - len(self.timings), self.default.name)
                return
            timings = {}
            for name, backend in list(self.candidates.items()):
                try:
                    timings[name] = time_one(backend, num_tokens, max_seqlen)
                except Exception as exc:  # a kernel that does not build or run here: never chosen
                    if backend is self.default:
                        raise
                    logger.warning("attention backend %s dropped: it failed on %s tokens, max_seqlen %s (%s: %s)",
                                   name, num_tokens, max_seqlen, type(exc).__name__, exc)
                    del self.candidates[name]
            self.timings[num_tokens, max_seqlen] = timings
            self.table[num_tokens, max_seqlen] = pick_fastest(timings, self.default.name)

    def describe(self) -> str:
        """The choice table for the log: one line per token bucket."""
        lines = []
        for num_tokens in sorted({t for t, _ in self.timings}):
            cells = []
            for (tokens, max_seqlen), timings in sorted(self.timings.items()):
                if tokens != num_tokens:
                    continue
                chosen = self.table[tokens, max_seqlen]
                others = ", ".join(f"{n} {1e6 * s:.0f}" for n, s in timings.items())
                cells.append(f"<={max_seqlen}: {chosen} ({others} us)")
            lines.append(f"  {num_tokens:>6} tokens  " + "; ".join(cells))
        return "\n".join(lines)

    def table_rows(self) -> list[tuple[str, str, str]]:
        """(token bucket, max_seqlen bucket, backend) for /metrics; untimed classes run the default."""
        rows = [(str(t), str(s), name) for (t, s), name in sorted(self.table.items())]
        return rows + [("other", "other", self.default.name)]


def pick_fastest(timings: dict[str, float], default: str, margin: float = MARGIN) -> str:
    """The fastest candidate, unless the default is within `margin` of it."""
    if not timings:
        return default
    fastest = min(timings, key=timings.get)
    if default in timings and timings[fastest] > (1 - margin) * timings[default]:
        return default
    return fastest


def representative_lengths(num_tokens: int, max_seqlen: int, max_num_seqs: int, seed: int = 0) -> list[int]:
    """Lengths log-uniform from 8 to max_seqlen, as many as fit in num_tokens and max_num_seqs.
    Above the smallest max_seqlen bucket the first is max_seqlen itself, so that the batch
    belongs to the class; the smallest holds every batch of short texts, whose longest may
    be anything up to it (a single query of the smallest token buckets, say)."""
    rng = np.random.default_rng(seed)
    shortest = min(8, max_seqlen)
    lengths = [max_seqlen] if max_seqlen > MIN_SEQLEN_BUCKET else []
    total = sum(lengths)
    while len(lengths) < max_num_seqs:
        n = int(round(math.exp(rng.uniform(math.log(shortest), math.log(max_seqlen)))))
        if total + n > num_tokens:
            break
        lengths.append(n)
        total += n
    return lengths
