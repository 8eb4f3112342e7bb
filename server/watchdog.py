"""Watchdog: notices a dead or stuck engine so that requests fail fast instead of hanging.

A batch that has been on the engine longer than `stall_timeout` seconds means the engine
thread is stuck (a hung kernel, a deadlock): nothing queued behind it can finish. The
watchdog then fails every waiting input with EngineUnavailableError, and `problem` stays
set (so /health answers 503 and new requests are refused) for as long as the batch is stuck.
If the batch does come back, the engine serves again. A dead engine (see
`Batcher.fatal_error`) never comes back: the process has to be restarted.

An engine in its own process (every engine of the server) that gets stuck is different: the
watchdog retires it (its process is killed, its batches fail) and the others serve on.
"""

from __future__ import annotations

import asyncio
import logging

from engine.batch_outcomes import EngineUnavailableError
from server.batcher import Batcher

logger = logging.getLogger("rose_embed.watchdog")


class Watchdog:
    """Checks the batcher a few times per stall timeout, on the event loop."""

    def __init__(self, batcher: Batcher, stall_timeout: float):
        self.batcher, self.stall_timeout = batcher, stall_timeout
        self._task: asyncio.Task | None = None
        self._was_stuck = False

    def problem(self) -> str | None:
        """Why the engine cannot serve now, or None when it can."""
        if self.batcher.fatal_error is not None:
            return self.batcher.fatal_error
        stalled = self.batcher.stalled_seconds()
        if stalled > self.stall_timeout:
            return f"the engine is stuck: a batch has been running for {stalled:.1f} s"
        return None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="rose-watchdog")

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        interval = min(1.0, self.stall_timeout / 4)
        while True:
            await asyncio.sleep(interval)
            self.batcher.retire_stalled(self.stall_timeout)
            problem = self.problem()
            if problem is not None:
                if not self._was_stuck:
                    logger.error("%s; failing the requests that wait on it", problem)
                # Every tick, as a request may have slipped in between the check and the stall.
                self.batcher.fail_pending(EngineUnavailableError(problem))
            elif problem is None and self._was_stuck:
                logger.warning("the engine serves again")
            self._was_stuck = problem is not None
