"""EngineProcess: the front end's handle on one engine process (a replica of `--data-parallel`).

The process runs engine/engine_worker.py. Batches go through shared-memory slots
(engine/shm_slots.py) with a small tuple down a pipe; replies are read on the event loop
(`add_reader` on the reply pipe, no thread), in the order the batches were sent. When the
process exits, for whatever reason (killed, crashed, out of memory), its exit is seen on
the same loop through the process's sentinel: its batches in flight fail, it leaves the
rotation, and the others serve on.
"""

from __future__ import annotations

import asyncio
import collections
import multiprocessing
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from engine.batch import PackedBatch
from engine.config import EngineConfig
from engine.engine_worker import run_engine_worker
from engine.replica import Replica, ReplicaLostError
from engine.shm_slots import SharedSlots, SlotLayout


@dataclass(eq=False)
class _Sent:
    slot: int
    num_seqs: int
    future: asyncio.Future
    running: object  # the batcher's record of the batch; `started` is set here


class EngineProcess(Replica):
    """Starts the process at once; `wait_ready` blocks until the model is loaded and warm."""

    can_retire = True

    def __init__(self, index: int, config: EngineConfig, layout: SlotLayout, plugin: Callable | None = None):
        super().__init__(index, config.device)
        self.dtype: str | None = None
        self.num_graph_replays = self.num_eager_runs = 0
        self.device_bytes = {"allocated": 0, "reserved": 0}  # on CUDA, as of the last reply
        context = multiprocessing.get_context("spawn")  # a forked CUDA context is unusable
        self.slots = SharedSlots.create(layout)
        task_reader, self._tasks = context.Pipe(duplex=False)
        self._replies, reply_writer = context.Pipe(duplex=False)
        # Daemonic: should this process end without stopping it, multiprocessing kills it at exit.
        self.process = context.Process(
            target=run_engine_worker, name=f"rose-engine-{index}", daemon=True,
            args=(config, self.slots.name, layout, task_reader, reply_writer, plugin),
        )
        try:
            self.process.start()
        except BaseException:
            self.slots.close()
            raise
        # The child holds the other ends now; closing ours makes its exit show as EOF here.
        task_reader.close()
        reply_writer.close()
        self.pid = self.process.pid
        self._free_slots = list(range(layout.num_slots))
        self._sent: collections.deque[_Sent] = collections.deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    def wait_ready(self, timeout: float) -> None:
        """Block (off the event loop) until the engine is warm; raise if it failed or died meanwhile."""
        deadline = time.monotonic() + timeout
        while not self._replies.poll(0.25):  # a child that died shows as EOF here, and recv says so
            if time.monotonic() > deadline:
                raise RuntimeError(f"engine {self.index} on {self.device} was not ready after {timeout:.0f} s")
        try:
            kind, info = self._replies.recv()
        except EOFError:
            raise RuntimeError(f"engine {self.index} on {self.device} did not start: {self._exit_reason()}") from None
        if kind != "ready":
            raise RuntimeError(f"engine {self.index} on {self.device} failed to load: {info}")
        self.pid, self.dtype = info["pid"], info["dtype"]

    def attach(self, loop: asyncio.AbstractEventLoop, on_lost) -> None:
        super().attach(loop, on_lost)
        self._loop = loop
        loop.add_reader(self._replies.fileno(), self._read_replies)
        loop.add_reader(self.process.sentinel, self._on_exit)

    def has_room(self) -> bool:
        # A batch whose waiter was cancelled still holds its slot until the engine replies.
        return bool(self._free_slots)

    async def compute(self, batch: PackedBatch, running) -> np.ndarray:
        if self.out_reason is not None:
            raise ReplicaLostError(self.out_reason)
        slot = self._free_slots[-1]
        self.slots.write_batch(slot, batch)  # raises (and keeps the slot free) if the batch does not fit
        self._free_slots.pop()
        sent = _Sent(slot, batch.num_seqs, self._loop.create_future(), running)
        self._sent.append(sent)
        if len(self._sent) == 1:  # the engine is idle, so it starts on this batch now
            running.started = time.perf_counter()
        try:
            self._tasks.send((slot, batch.num_tokens, batch.num_seqs, batch.max_seqlen))
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
        self.num_graph_replays, self.num_eager_runs = stats[0], stats[1]
        self.device_bytes = {"allocated": stats[2], "reserved": stats[3]}
        if self._sent and self._sent[0].running.started is None:
            self._sent[0].running.started = time.perf_counter()  # the engine moves on to the next batch
        if not sent.future.done():
            if error is not None:
                sent.future.set_exception(RuntimeError(f"engine {self.index} on {self.device}: {error}"))
            else:  # copied out, as the slot is the next batch's as soon as it is free
                sent.future.set_result(self.slots.output(slot)[: sent.num_seqs].copy())
        self._free_slots.append(slot)

    def _on_exit(self) -> None:
        self._read_replies()  # whatever it answered before it went
        self._lost(self._exit_reason())

    def _exit_reason(self, wait: float = 1.0) -> str:
        self.process.join(wait)  # its pipe closes as it exits; the exit code follows at once
        code = self.process.exitcode
        if code is None:
            return "its process closed its pipe"
        if code < 0:
            try:
                return f"its process was killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"its process was killed by signal {-code}"
        return f"its process exited with status {code}"

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
        if self.process.is_alive():
            self.process.kill()

    def _detach(self) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._replies.fileno())
            self._loop.remove_reader(self.process.sentinel)
        self._loop = None

    def ask_to_stop(self) -> None:
        """The engine finishes the batches it holds and exits (a dead one is not asked)."""
        if self.process.is_alive() and not self._tasks.closed:
            try:
                self._tasks.send(None)
            except OSError:
                pass

    def stop_serving(self) -> None:
        """On the event loop: leave the rotation quietly (the server is going down), fail what is
        in flight and ask the process to exit. `shutdown` (off the loop) then waits for it."""
        if self.out_reason is None:
            self.out_reason = "stopped"  # not lost: nobody is told
        self._lost(self.out_reason)
        self.ask_to_stop()

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop the engine: ask, wait up to `timeout` s, then kill; free the shared memory."""
        if self._closed:
            return
        self._closed = True
        self.stop_serving()
        self.process.join(timeout)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)
        self._tasks.close()
        self._replies.close()
        self.slots.close()
