"""EngineLink: a front end's connection to an engine process, seen by the batcher as a replica.

A link is a set of shared-memory slots (engine/shm_slots.py) and two pipes, made by the
supervisor (server/engine_host.py) and handed to the front end as `EngineEnds`: tasks go
down one pipe as small tuples, replies come back on the other and are read on the event
loop (`add_reader`, no thread), in the order the batches were sent. The engine's exit, for
whatever reason (killed, crashed, out of memory), shows as the reply pipe's end of file:
its batches in flight fail, it leaves the rotation, and the other engines serve on.
"""

from __future__ import annotations

import asyncio
import collections
import multiprocessing
import os
import signal
import time
from dataclasses import dataclass

import numpy as np

from engine.rose.batch import PackedBatch
from server.engine_host import EngineEnds, exit_reason
from server.replica import Replica, ReplicaLostError
from engine.shm_slots import SharedSlots


class EngineLoadError(RuntimeError):
    """An engine process that failed to load, died, or did not warm up in time; the message says which."""


@dataclass(eq=False)
class _Sent:
    slot: int
    num_outputs: int  # the vectors the batch pools
    future: asyncio.Future
    running: object  # the batcher's record of the batch; `started` is set here


class EngineLink(Replica):
    """One front end's link to one engine process."""

    can_retire = True

    def __init__(self, ends: EngineEnds, process: multiprocessing.process.BaseProcess | None = None):
        """`process`: the engine's Process object where it is this process's child (one front end,
        in the supervisor), so that its exit status can be told; None in a spawned front end."""
        super().__init__(ends.index, ends.device)
        self.pid = ends.pid
        self._process = process
        slots, tasks, replies = SharedSlots.attach(ends.shm_name, ends.layout), ends.tasks, ends.replies
        self.dtype: str | None = None
        self.attention_table: list[tuple[str, str, str]] = []  # (token bucket, max_seqlen bucket, backend)
        self.num_graph_replays = self.num_eager_runs = self.num_capture_failures = 0
        self.device_bytes = {"allocated": 0, "reserved": 0}  # on CUDA, as of the last reply
        self.slots, self._tasks, self._replies = slots, tasks, replies
        self._free_slots = list(range(slots.layout.num_slots))
        self._sent: collections.deque[_Sent] = collections.deque()
        self._loop: asyncio.AbstractEventLoop | None = None

    def _exit_reason(self) -> str:
        """Why the engine is gone, as /health and the errors say it."""
        if self._process is None:
            return f"its process (pid {self.pid}) closed its pipe"
        self._process.join(1.0)  # its pipe closes as it exits; the exit code follows at once
        return exit_reason(self._process.exitcode)

    def _kill(self) -> None:
        """Kill the engine process (a stuck kernel would never return); every front end sees it go."""
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def wait_ready(self, timeout: float) -> None:
        """Block (off the event loop) until the engine is warm; raise if it failed or died meanwhile."""
        deadline = time.monotonic() + timeout
        while not self._replies.poll(0.25):  # a process that died shows as EOF here, and recv says so
            if time.monotonic() > deadline:
                raise EngineLoadError(f"engine {self.index} on {self.device} was not ready after {timeout:.0f} s")
        try:
            kind, info = self._replies.recv()
        except EOFError:
            why = self._exit_reason()
            raise EngineLoadError(f"engine {self.index} on {self.device} did not start: {why}") from None
        if kind != "ready":
            raise EngineLoadError(f"engine {self.index} on {self.device} failed to load: {info}")
        self.pid, self.dtype = info["pid"], info["dtype"]
        self.attention_table = [tuple(row) for row in info.get("attention", [])]

    def attach(self, loop: asyncio.AbstractEventLoop, on_lost) -> None:
        super().attach(loop, on_lost)
        self._loop = loop
        loop.add_reader(self._replies.fileno(), self._read_replies)

    def has_room(self) -> bool:
        # A batch whose waiter was cancelled still holds its slot until the engine replies.
        return bool(self._free_slots)

    async def compute(self, batch: PackedBatch, running) -> np.ndarray:
        if self.out_reason is not None:
            raise ReplicaLostError(self.out_reason)
        slot = self._free_slots[-1]
        self.slots.write_batch(slot, batch)  # raises (and keeps the slot free) if the batch does not fit
        self._free_slots.pop()
        sent = _Sent(slot, batch.num_outputs, self._loop.create_future(), running)
        self._sent.append(sent)
        if len(self._sent) == 1:  # the engine is idle (as far as this front end knows): it starts now
            running.started = time.perf_counter()
        try:
            num_outputs = None if batch.cu_segments is None else batch.num_outputs
            self._tasks.send((slot, batch.num_tokens, batch.num_seqs, batch.max_seqlen, num_outputs))
        except OSError:  # a broken pipe: the process is gone
            self._lost(self._exit_reason())
        return await sent.future

    def _read_replies(self) -> None:
        try:
            while self._replies.poll():
                self._on_reply(*self._replies.recv())
        except (EOFError, OSError):
            self._lost(self._exit_reason())

    def _on_reply(self, slot: int, seconds: float, error: str | None, stats: tuple) -> None:
        if not self._sent or self._sent[0].slot != slot:
            self.retire(f"it replied for slot {slot} out of turn")  # nothing it says can be trusted now
            return
        sent = self._sent.popleft()
        self.num_graph_replays, self.num_eager_runs, self.num_capture_failures = stats[:3]
        self.device_bytes = {"allocated": stats[3], "reserved": stats[4]}
        if self._sent and self._sent[0].running.started is None:
            self._sent[0].running.started = time.perf_counter()  # the engine moves on to the next batch
        if not sent.future.done():
            if error is not None:
                sent.future.set_exception(RuntimeError(f"engine {self.index} on {self.device}: {error}"))
            else:  # copied out, as the slot is the next batch's as soon as it is free
                sent.future.set_result(self.slots.output(slot)[: sent.num_outputs].copy())
        self._free_slots.append(slot)

    def _lost(self, reason: str) -> None:
        self._detach()
        self._go_out(reason)
        sent, self._sent = self._sent, collections.deque()
        for item in sent:
            if not item.future.done():
                item.future.set_exception(ReplicaLostError(f"engine {self.index} on {self.device}: {reason}"))

    def retire(self, reason: str) -> None:
        """Out of rotation now; the process is killed (a stuck kernel would never return)."""
        self._lost(reason)
        self._kill()

    def _detach(self) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._replies.fileno())
        self._loop = None

    def ask_to_stop(self) -> None:
        """Tell the engine that this front end sends nothing more (a dead one is not asked)."""
        if not self._tasks.closed:
            try:
                self._tasks.send(None)
            except OSError:
                pass

    def stop_serving(self) -> None:
        """On the event loop: leave the rotation quietly (the server is going down), fail what is
        in flight and ask the engine to stop. `shutdown` (off the loop) then waits for it."""
        if self.out_reason is None:
            self.out_reason = "stopped"  # not lost: nobody is told
        self._lost(self.out_reason)
        self.ask_to_stop()

    def shutdown(self, timeout: float = 5.0) -> None:
        """This front end is done with the engine: tell it, close the pipes and let go of the slots."""
        if self._tasks.closed:
            return
        if self.out_reason is None:  # not yet told (stop_serving tells it once; a dead engine needs nothing)
            self.stop_serving()
        self._tasks.close()
        self._replies.close()
        self.slots.close()
