"""The device's speed while it computes: what Retry-After divides a queue by."""

from __future__ import annotations

import collections

WINDOW_S = 10.0  # of busy time: the latest batches, however long ago they ran


class BusyRate:
    """The device's tokens per second while it computes, over its latest batches (WINDOW_S of
    busy time): what a queue will drain at. A batch counts from its launch or the previous
    batch's end, whichever is later, so that neither a batch queued behind another on the device
    nor an idle spell before it counts as its time."""

    def __init__(self):
        self._batches: collections.deque[tuple[int, float]] = collections.deque()  # (tokens, busy seconds)
        self._tokens, self._seconds = 0, 0.0
        self._last_finished = float("-inf")

    def record(self, num_tokens: int, started: float, finished: float) -> float:
        """Count a batch (its launch and end, time.monotonic()); the tokens per second now."""
        seconds = max(finished - max(started, self._last_finished), 1e-6)
        self._last_finished = finished
        self._batches.append((num_tokens, seconds))
        self._tokens, self._seconds = self._tokens + num_tokens, self._seconds + seconds
        while len(self._batches) > 1 and self._seconds - self._batches[0][1] >= WINDOW_S:
            tokens, seconds = self._batches.popleft()
            self._tokens, self._seconds = self._tokens - tokens, self._seconds - seconds
        return self._tokens / self._seconds
