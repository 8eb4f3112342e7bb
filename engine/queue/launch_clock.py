"""When a GPU's next batch should be launched: shortly before the device runs out of work, not sooner.

A GPU runs the batches launched on its stream one after the other. A batch launched while another
computes keeps the device busy across the host's gap between them (reading one batch back,
cutting and launching the next), but it is cut at launch: a query that arrives after it waits
for the batch computing, then for the queued one, then for its own. So the loop launches the
next batch only once the work in flight is due to end within LEAD_SECONDS, time enough for the
host to cut and launch it: the next batch is cut as late as the device allows, and a query that
arrives while a batch computes goes into the one right after it.

When the work in flight ends is estimated: each batch takes its tokens times the seconds per token
measured on the batches that landed (from warm-up's speed until then), from the end of the batch
before it or its launch, whichever is later. A landing re-anchors the estimate of what follows it.
An estimate that is too long costs no more than launching after the landing (the loop also wakes
on every landing); one that is too short launches early, as the loop did before this clock.
"""

from __future__ import annotations

import collections

# What the host needs between deciding to launch a batch and the device starting it (cutting the batch
# from the queue, joining its pieces, copying its inputs, replaying its graph), with room to spare.
LEAD_SECONDS = 0.002
# Weight of the latest landed batch in the running estimate of the device's seconds per token.
SMOOTHING = 0.2


class LaunchClock:
    def __init__(self, tokens_per_second: float = 0.0):
        """`tokens_per_second`: the speed measured at warm-up (0: unknown until a batch lands)."""
        self.seconds_per_token = 1.0 / tokens_per_second if tokens_per_second > 0 else 0.0
        self._in_flight: collections.deque[list[float]] = collections.deque()  # [launched, tokens, estimated end]
        self._device_free = float("-inf")  # when the last landed batch ended

    def launched(self, num_tokens: int, now: float) -> None:
        start = max(now, self._in_flight[-1][2]) if self._in_flight else now
        self._in_flight.append([now, num_tokens, start + num_tokens * self.seconds_per_token])

    def landed(self, finished: float) -> None:
        """The oldest batch in flight ended at `finished`."""
        launched, tokens, _ = self._in_flight.popleft()
        took = finished - max(launched, self._device_free)
        self._device_free = finished
        if tokens > 0 and took > 0:
            measured = took / tokens
            self.seconds_per_token = measured if self.seconds_per_token == 0 else (
                (1 - SMOOTHING) * self.seconds_per_token + SMOOTHING * measured)
        end = finished
        for batch in self._in_flight:  # each starts once the one before it ends, or at its launch
            end = batch[2] = max(end, batch[0]) + batch[1] * self.seconds_per_token

    def seconds_to_launch(self, now: float) -> float:
        """How long the loop may wait before launching the next batch (0: launch now)."""
        if not self._in_flight:
            return 0.0
        return max(0.0, self._in_flight[-1][2] - LEAD_SECONDS - now)
