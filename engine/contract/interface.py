"""The one interface through which the server reaches its engines, and what a piece can end in.

A front end opens a request (admitted to the queue, or refused with QueueFullError), computes
its pieces (each a packed batch of a few of the request's tokenized inputs) and closes the
request; each piece's vectors come back as soon
as they are ready, whichever engine computed them. The server's implementation is
server/links/engine_links.py (engine processes, or an engine in a thread of the front end's own
process, over the same messages: engine/contract/messages.py). The server never asks which kind of
engine it has.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from rose_embed.engine.contract.batch import PackedBatch


class QueueFullError(RuntimeError):
    """The queue holds more tokens than allowed; the caller should retry later."""

    def __init__(self, retry_after: int):
        super().__init__(f"the server is busy; retry in {retry_after} s")
        self.retry_after = retry_after


def retry_after_seconds(tokens_ahead: float, tokens_per_second: float) -> int:
    """Seconds until `tokens_ahead` are computed at `tokens_per_second` (the device's speed while
    busy: an idle spell before a burst must not stretch it), as Retry-After says it: 1 to 60."""
    return int(min(60, max(1, tokens_ahead / tokens_per_second))) if tokens_per_second > 0 else 1


class BatchFailedError(RuntimeError):
    """Computing the batch that held this piece failed; other batches are unaffected."""


class EngineUnavailableError(RuntimeError):
    """No engine can compute (dead, or stuck): nothing runs until one recovers or is restarted.
    `retry_after`: seconds until one should serve again, where that is expected; else None."""

    def __init__(self, message: str, retry_after: int | None = None):
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(frozen=True)
class PieceVectors:
    """A piece's vectors [num_outputs, dim] float32, one per sequence (or per segment), in order;
    `started` / `finished`: time.monotonic() of its first batch's launch and its last batch's end."""

    vectors: np.ndarray
    started: float
    finished: float


class Request(Protocol):
    """One client request's pieces, as one unit: admitted or refused together, cancelled together."""

    async def compute(self, piece: PackedBatch) -> PieceVectors:
        """The piece's vectors. Raises BatchFailedError (its batch failed; a retry may succeed) or
        EngineUnavailableError."""

    def settle(self, num_tokens: int) -> None:
        """The request is tokenized: `num_tokens` replaces the cost it was admitted with."""

    def close(self) -> None:
        """Done with the request (answered, failed or abandoned): what of it has not run is dropped."""


class Engines(Protocol):
    """The server's engines: one per device, each with its own queue, fair among the requests that wait."""

    dtype: str | None

    def open_request(self, model: int = 0, cost: float = 0.0, weight: float = 1.0) -> Request:
        """A request for served model `model` (its place in the server's list of models) of about
        `cost` tokens, with `weight` times a default request's share of each batch; QueueFullError
        where the queue has no room for it."""

    def problem(self) -> str | None:
        """Why no engine can serve now (all dead or stuck), or None."""

    def retry_after(self) -> int | None:
        """Seconds until an engine should serve again where none does (one being restarted), or None."""

    def describe(self) -> list[dict]:
        """Each engine as /health lists it."""
