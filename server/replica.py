"""Replicas: the engines the batcher sends batches to, each one model on one device.

`EngineLink` (server/engine_link.py) is an engine process, what the server runs on every
device. `LocalReplica` is an in-process engine driven by one thread (tests and programs that
embed the app with an Engine object). The batcher sees only this interface: it picks a replica, awaits
`compute`, and keeps the load figures (`num_in_flight`, `tokens_in_flight`) up to date.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from engine.rose.batch import PackedBatch


class ReplicaLostError(RuntimeError):
    """The replica can compute nothing more (its thread or process died, or it was retired)."""


class Replica:
    """What the batcher needs of an engine; subclasses implement `compute`."""

    can_retire = False  # True: a stuck replica may be killed and taken out of rotation

    def __init__(self, index: int, device: str):
        self.index, self.device = index, device
        self.pid = os.getpid()
        self.out_reason: str | None = None  # set once the replica is out of rotation, for good
        # Kept by the batcher, read by /health and /metrics.
        self.num_in_flight = 0
        self.tokens_in_flight = 0
        self.num_batches = 0
        self.num_tokens = 0
        self._on_lost: Callable[[Replica], None] | None = None

    @property
    def is_serving(self) -> bool:
        return self.out_reason is None

    def attach(self, loop: asyncio.AbstractEventLoop, on_lost: Callable[[Replica], None]) -> None:
        """Called by the batcher on its event loop; `on_lost` runs there when the replica goes out."""
        self._on_lost = on_lost

    def has_room(self) -> bool:
        """Whether it can take one more batch now (beyond the batcher's own cap per replica)."""
        return True

    async def compute(self, batch: PackedBatch, running) -> np.ndarray | None:
        """The batch's vectors [num_outputs, dim] float32 (one per pooling segment: engine/rose/batch.py),
        or None if every input was cancelled first.

        Sets `running.started` when the engine picks the batch up. Raises ReplicaLostError
        when the replica died; any other exception fails this batch only.
        """
        raise NotImplementedError

    def retire(self, reason: str) -> None:
        """Take a stuck replica out of rotation (only where `can_retire`)."""
        raise NotImplementedError

    def shutdown(self) -> None:
        """Release what the replica holds (threads, a process); the batcher has stopped."""

    def describe(self) -> dict:
        """The replica as /health lists it."""
        state = {"index": self.index, "device": self.device, "pid": self.pid,
                 "state": "serving" if self.is_serving else "out"}
        if self.out_reason is not None:
            state["reason"] = self.out_reason
        state.update(batches=self.num_batches, tokens=self.num_tokens, batches_in_flight=self.num_in_flight,
                     tokens_in_flight=self.tokens_in_flight)
        return state

    def _go_out(self, reason: str) -> bool:
        """Mark the replica out (the first reason stays); True the first time."""
        if self.out_reason is not None:
            return False
        self.out_reason = reason
        if self._on_lost is not None:
            self._on_lost(self)
        return True


class LocalReplica(Replica):
    """The engine in this process: one thread drives the device, another waits for results."""

    def __init__(self, engine, index: int = 0):
        super().__init__(index, str(getattr(engine, "device", "cpu")))
        self.engine = engine
        self._engine_thread = ThreadPoolExecutor(1, thread_name_prefix="rose-engine")
        self._readback_thread = ThreadPoolExecutor(1, thread_name_prefix="rose-readback")

    def _execute(self, batch: PackedBatch, running):
        """On the engine thread: note when the batch really starts (the stall watchdog reads it)."""
        if all(e.future.done() for e in running.entries):
            return None  # every input was failed or cancelled while the batch waited for this thread
        running.started = time.perf_counter()
        return self.engine.execute_packed(batch)

    async def compute(self, batch: PackedBatch, running) -> np.ndarray | None:
        loop = asyncio.get_running_loop()
        try:
            lazy = await loop.run_in_executor(self._engine_thread, self._execute, batch, running)
            if lazy is None:
                return None
            return lazy.wait() if lazy.ready() else await loop.run_in_executor(self._readback_thread, lazy.wait)
        except (asyncio.CancelledError, Exception):
            raise
        except BaseException as exc:
            # SystemExit and the like end a plain thread: the engine is dead. Not re-raised, as a
            # SystemExit leaving a task would stop the whole event loop with every request in it.
            reason = f"the engine thread died ({type(exc).__name__})"
            self._go_out(reason)
            raise ReplicaLostError(reason) from None

    def shutdown(self, wait: bool = True) -> None:
        # Joining a thread stuck in a kernel would hang the shutdown for ever.
        self._engine_thread.shutdown(wait=wait)
        self._readback_thread.shutdown(wait=wait)
