"""The one request pipeline behind every route that computes vectors: parts in, answers out.

A route cuts its request into parts (a few dozen texts each; a small request is one part)
and says how to make each part ready (tokenize, fit long inputs) and how to turn its
vectors into answers (combine windows, encode). The pipeline makes the parts ready one after
another, off the event loop where that pays, cuts each into pieces within the engine's
budget and hands every piece to the engines the moment it is ready: the device starts on
the first piece while later parts are still being tokenized, and each part's answers are
made as soon as its vectors land, while later parts compute. Answers keep the request's
order. Whatever ends the request early (an error, the client leaving, the timeout) drops
what of it has not run. The request is admitted to the queue (it holds an engine request,
`queued`) before the pipeline starts: nothing is tokenized for a request that is refused.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import itertools
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np
from litestar import Request

from rose_embed.engine.contract.interface import PieceVectors, Request as EngineRequest
from rose_embed.engine.contract.batch import pack_pieces
from rose_embed.server.http.errors import APIError
from rose_embed.server.http.disconnect import wait_for_disconnect
from rose_embed.server.pipeline.guards import request_timeout
from rose_embed.server.http.trace import RequestTrace

T = TypeVar("T")

# Texts per part: small enough that the device starts on a large request's first piece within
# a millisecond or so of tokenizing, large enough that a part's own costs stay small.
PART_TEXTS = 64
# A large request's first parts, in texts: the device waits for the first alone.
RAMP_TEXTS = (PART_TEXTS // 4, PART_TEXTS // 2)


@dataclass
class ReadyPart:
    """A part made ready: its sequences (and, for late chunking, their segment ids; for images, their
    pixels, each sequence an image's placeholder tokens), and how its rows of vectors [num_outputs, dim]
    become what the route answers with (`finish` may give an awaitable of it, where that work is done
    elsewhere)."""

    seqs: list[np.ndarray]
    finish: Callable[[np.ndarray], T]
    segments: list[np.ndarray] | None = None
    pixels: np.ndarray | None = None  # [len(seqs), 3, S, S] float32: the part is these images

    @property
    def num_tokens(self) -> int:
        return sum(len(s) for s in self.seqs)


@dataclass
class Outcome(Generic[T]):
    answers: list[T]  # each part's finished answer, in order
    num_tokens: int


def part_bounds(num_items: int, part_size: int = PART_TEXTS) -> list[tuple[int, int]]:
    """[lo, hi) ranges of items, in order. Up to PART_TEXTS items are one part; more start with
    the RAMP_TEXTS parts, then go on `part_size` each (the last may be shorter): the device
    waits for a large request's first part alone, so that one is made ready soonest, while
    the next ones are already on their way."""
    if num_items <= PART_TEXTS:
        return [(0, num_items)]
    bounds, lo = [], 0
    for size in RAMP_TEXTS:
        bounds.append((lo, lo + size))
        lo += size
    bounds += [(start, min(start + part_size, num_items)) for start in range(lo, num_items, part_size)]
    return bounds


async def run_parts(request: Request, queued: EngineRequest, trace: RequestTrace,
                    parts: Sequence[Callable[[], Awaitable[ReadyPart]]], budget: tuple[int, int],
                    max_tokens: int, tokens_error: Callable[[int, bool], APIError], timeout: float | None,
                    parts_ahead: int = 1) -> Outcome:
    """Make each part ready in turn and compute it on the admitted engine request `queued` (its
    admission closes it: server/pipeline/compute_request.py); every part's `finish` result, in order.

    `budget`: (max tokens, max vectors) of one piece, the engine's batch budget. The request's
    tokens may not pass `max_tokens`: past it, `tokens_error(count, is_whole)` ends the request, where
    `count` is what the parts made ready so far hold and `is_whole` whether they are all of them (the
    rest is never tokenized: a request past the cap is refused as soon as it is known to be).
    `parts_ahead`: parts being made ready at once (more than one where they are tokenized in
    processes, side by side; a part tokenized in place would only delay the first piece)."""
    job = _Job(request, queued, trace, budget, parts_ahead)
    try:
        return await _with_deadline(job.run(parts, max_tokens, tokens_error), request, timeout)
    finally:
        job.close()


class _Job:
    def __init__(self, request: Request, queued: EngineRequest, trace: RequestTrace, budget: tuple[int, int],
                 parts_ahead: int):
        self.request, self.trace, self.budget, self.parts_ahead = request, trace, budget, parts_ahead
        self.queued = queued
        self.tasks: list[asyncio.Task] = []
        self.tasks_ahead: collections.deque[asyncio.Future] = collections.deque()  # parts being made ready

    async def run(self, parts, max_tokens: int, tokens_error) -> Outcome:
        num_tokens, tokenizing = 0, 0.0
        ahead, upcoming = self.tasks_ahead, iter(parts)
        for make_ready in itertools.islice(upcoming, self.parts_ahead):
            ahead.append(asyncio.ensure_future(make_ready()))
        while ahead:
            started = time.perf_counter()
            part = await ahead.popleft()
            tokenizing += time.perf_counter() - started
            for make_ready in itertools.islice(upcoming, 1):
                ahead.append(asyncio.ensure_future(make_ready()))
            num_tokens += part.num_tokens
            if num_tokens > max_tokens:
                raise tokens_error(num_tokens, not ahead and next(upcoming, None) is None)
            self.tasks.append(asyncio.ensure_future(self._compute(part)))
            if self.trace.submitted is None:
                self.trace.submitted = time.monotonic()
            # A part tokenized in place never suspends: without a turn of the loop here its pieces
            # would reach the engines only once the whole request is tokenized.
            await asyncio.sleep(0)
        self.trace.tokenization_seconds = tokenizing
        self.trace.num_tokens = num_tokens
        self.queued.settle(num_tokens)
        answers = await asyncio.gather(*self.tasks)
        return Outcome(list(answers), num_tokens)

    async def _compute(self, part: ReadyPart):
        vectors = await self._vectors(part) if part.seqs else np.zeros((0, 0), np.float32)
        answer = part.finish(vectors)
        return await answer if inspect.isawaitable(answer) else answer

    async def _vectors(self, part: ReadyPart) -> np.ndarray:
        pieces = pack_pieces(part.seqs, part.segments, *self.budget, pixels=part.pixels)
        results: list[PieceVectors] = await asyncio.gather(*(self.queued.compute(piece) for piece in pieces))
        for result in results:
            self.trace.add_batch(result.started, result.finished)
        return results[0].vectors if len(results) == 1 else np.concatenate([r.vectors for r in results])

    def close(self) -> None:
        for task in [*self.tasks_ahead, *self.tasks]:
            if not task.done():
                task.cancel()
            else:  # read, so that asyncio does not log an exception nobody awaited
                task.cancelled() or task.exception()


async def _with_deadline(work: Awaitable[T], request: Request, timeout: float | None) -> T:
    """`work`'s result, unless the client goes away (499) or `timeout` passes (504) first."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(wait_for_disconnect(request))
    try:
        await asyncio.wait({task, watcher}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        disconnected = watcher.done()
        watcher.cancel()
        if not task.done():
            task.cancel()
            try:
                await task
            except BaseException:  # the cancellation, or what the work raised as it ended
                pass
    if task.cancelled():
        if not disconnected:
            raise request_timeout()
        raise APIError(499, "The client closed the request.", "invalid_request_error", None, "client_closed")
    return task.result()

