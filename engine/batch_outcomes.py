"""What a batch comes to: its record once computed, or the error each of its inputs gets.

The batcher (server/batcher.py) produces them; the server maps the errors to HTTP statuses
(server/errors.py) and reads the records for metrics and request timing.
"""

from __future__ import annotations

from dataclasses import dataclass


class QueueFullError(RuntimeError):
    """The queue holds more tokens than allowed; the caller should retry later."""

    def __init__(self, retry_after: int):
        super().__init__(f"the server is busy; retry in {retry_after} s")
        self.retry_after = retry_after


class BatchFailedError(RuntimeError):
    """Computing the batch that held this input failed; other batches are unaffected."""


class EngineUnavailableError(RuntimeError):
    """The engine thread died or is stuck: nothing can be computed until it recovers or restarts."""


@dataclass(frozen=True)
class BatchRecord:
    """What one executed batch held; kept for tests and metrics."""

    num_seqs: int
    num_tokens: int
    owners: tuple
    compute_seconds: float  # from the engine thread picking the batch up to its vectors on the host
    started: float = 0.0  # time.perf_counter() when the engine thread picked it up
    finished: float = 0.0
    engine: int = 0  # the index of the replica that computed it
