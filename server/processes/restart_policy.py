"""How often the supervisor restarts an engine process that died, and how soon.

An engine that died is restarted at once the first time; each further death within the
window waits twice as long as the one before (1 s, 2 s, 4 s, ... at most MAX_DELAY_S), so that
a device that fails on every start is not hammered. Past `max_restarts` deaths within the
window the server gives up and exits non-zero: an orchestrator's restart (a fresh process, a
fresh device context, maybe another node) has a better chance than another try here.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable

MAX_DELAY_S = 30.0


class RestartPolicy:
    """One engine's restarts: `next_delay` on each death says how long to wait, or None to give up."""

    def __init__(self, max_restarts: int, window_s: float, clock: Callable[[], float] = time.monotonic):
        self.max_restarts, self.window_s = max_restarts, window_s
        self._clock = clock
        self._restarts: collections.deque[float] = collections.deque()  # when each recent one was decided

    @property
    def num_recent(self) -> int:
        """Restarts within the window, this one included once `next_delay` has granted it."""
        return len(self._restarts)

    def next_delay(self) -> float | None:
        """Seconds to wait before restarting the engine that just died; None past the limit."""
        now = self._clock()
        while self._restarts and now - self._restarts[0] > self.window_s:
            self._restarts.popleft()
        if len(self._restarts) >= self.max_restarts:
            return None
        delay = 0.0 if not self._restarts else min(MAX_DELAY_S, 2.0 ** (len(self._restarts) - 1))
        self._restarts.append(now)
        return delay
