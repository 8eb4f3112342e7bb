"""A batch's token budget on the CPU, chosen at warm-up so that a batch takes a bounded time.

On the CPU a batch costs a fixed overhead (the layers' calls, the attention's set-up) plus a
time per token that stops falling past a few hundred tokens: larger batches gain nothing but
latency, and a one-text query waits for the batch in flight before its own runs. So the budget
is the smallest that keeps the overhead to a small share of a batch's time: two batches are
timed at warm-up (a small one and a large one of typical 32-token texts), a line through them
gives the overhead `a` and the time per token `b`, and the budget is where `b * n` is
EFFICIENCY of `a + b * n`, within MIN_BUDGET and the runner's CPU chunk (a CPU batch runs in
chunks of that many tokens anyway: a larger budget would gain nothing), and never more than
the configured one. The two sizes are timed in turn, several times, the fastest of each
counting: a machine busy with something else at start-up slows both alike.

On a GPU the speed per token keeps rising with the batch up to thousands of tokens (the matrix
products fill the device), and a small model's full batch takes a few milliseconds, a large
one's tens. So the budget is the smallest power of two from GPU_MIN_BUDGET (or the configured
budget itself) whose speed is at least GPU_EFFICIENCY of the configured budget's: batches only as
large as throughput needs, each taking as little time as that allows (a query waits for about one). Each size is timed
as the loop runs batches, one launched behind another (its graphs captured at warm-up), several
times in turn, the fastest counting.

A large model's budget still makes batches of tens of milliseconds, and a query rides a whole one
after the one computing. So the same timings give a second, smaller budget, the express one: the
largest size timed whose batch takes at most EXPRESS_BATCH_SECONDS, about what a query costs alone
end to end (HTTP, tokenizing, a batch of its own). While small requests wait beside larger ones (or
came within a full batch's time), the loop cuts its batches at that budget (engine/queue/express_lane.py):
the queries go first and the bulk requests fill the rest, so a query waits for a batch of about its own
cost, not for a large one. A small model's full batch takes less than that anyway, and its express
budget is the budget itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from rose_embed.engine.rose.runner import CPU_CHUNK_TOKENS

EFFICIENCY = 0.95  # of a large batch's speed per token
GPU_EFFICIENCY = 0.97  # of the configured budget's speed
GPU_MIN_BUDGET = 1024
GPU_BATCHES_TIMED = 6  # a size's batches launched back to back in one timing
EXPRESS_BATCH_SECONDS = 0.005  # the longest express batch (see the module's docstring)
SEQ_TOKENS = 32
SMALL_TOKENS, LARGE_TOKENS = 64, 512
MIN_BUDGET = 256
ROUND_TO = 64
TIMINGS = 4  # each size is timed this many times; the fastest counts (the least disturbed)


@dataclass(frozen=True)
class BudgetChoice:
    max_batch_tokens: int
    tokens_per_second: float  # at that budget
    batch_seconds: float  # one full batch's time
    speeds: tuple[tuple[int, float], ...] = ()  # (tokens, tokens/s) of each size timed, where several were
    express_tokens: int = 0  # the express budget (a GPU's; 0: the budget itself)


def time_batches(run: Callable[[list[np.ndarray]], None], sizes: tuple[int, ...],
                 repeats: int = TIMINGS) -> list[float]:
    """Per size, the fastest of `repeats` runs of a batch of that many tokens in SEQ_TOKENS-token texts,
    the sizes run in turn."""
    batches = [[np.full(SEQ_TOKENS, 100, np.int32) for _ in range(max(1, n // SEQ_TOKENS))] for n in sizes]
    best = [float("inf")] * len(sizes)
    for _ in range(repeats):
        for i, seqs in enumerate(batches):
            started = time.perf_counter()
            run(seqs)
            best[i] = min(best[i], time.perf_counter() - started)
    return best


def cpu_budget(run: Callable[[list[np.ndarray]], None], max_batch_tokens: int) -> BudgetChoice:
    """The budget for the CPU (see the module's docstring); `run(seqs)` computes a batch and waits for it."""
    small, large = time_batches(run, (SMALL_TOKENS, LARGE_TOKENS))
    per_token = max((large - small) / (LARGE_TOKENS - SMALL_TOKENS), 1e-9)
    overhead = max(small - per_token * SMALL_TOKENS, 0.0)
    tokens = EFFICIENCY / (1 - EFFICIENCY) * overhead / per_token
    tokens = int(min(max(MIN_BUDGET, -(-tokens // ROUND_TO) * ROUND_TO), CPU_CHUNK_TOKENS, max_batch_tokens))
    seconds = overhead + per_token * tokens
    return BudgetChoice(tokens, tokens / seconds, seconds)


def gpu_budget(launch: Callable[[list[np.ndarray]], object], max_batch_tokens: int) -> BudgetChoice:
    """The budget for a GPU (see the module's docstring); `launch(seqs)` starts a batch and returns what
    `wait()`s for it."""
    sizes = [n for n in (GPU_MIN_BUDGET << k for k in range(16)) if n < max_batch_tokens] + [max_batch_tokens]
    seconds = time_batches(lambda seqs: _back_to_back(launch, seqs), tuple(sizes))
    speeds = [GPU_BATCHES_TIMED * max(1, n // SEQ_TOKENS) * SEQ_TOKENS / s for n, s in zip(sizes, seconds)]
    tokens = next(n for n, speed in zip(sizes, speeds) if speed >= GPU_EFFICIENCY * speeds[-1])
    speed = speeds[sizes.index(tokens)]
    quick = [n for n, s in zip(sizes, speeds) if n <= tokens and n / s <= EXPRESS_BATCH_SECONDS]
    return BudgetChoice(tokens, speed, tokens / speed, tuple(zip(sizes, speeds)), max(quick, default=sizes[0]))


def _back_to_back(launch: Callable[[list[np.ndarray]], object], seqs: list[np.ndarray]) -> None:
    """GPU_BATCHES_TIMED batches, each launched while the one before it computes."""
    ahead = launch(seqs)
    for _ in range(GPU_BATCHES_TIMED - 1):
        behind = launch(seqs)
        ahead.wait()
        ahead = behind
    ahead.wait()


def measured_speed(run: Callable[[list[np.ndarray]], None], max_batch_tokens: int) -> BudgetChoice:
    """The configured budget as it is, with its speed measured (a GPU's, after its graphs are captured)."""
    (seconds,) = time_batches(run, (max_batch_tokens,), repeats=2)
    return BudgetChoice(max_batch_tokens, max_batch_tokens / seconds, seconds)
