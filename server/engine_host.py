"""EngineHost: the supervisor's handle on one engine process, and EngineEnds, a front end's way in.

The supervisor (server/supervisor.py) starts one engine process per device and connects
every front end to every engine: for each (engine, front end) pair a set of shared-memory
slots and a pair of pipes (engine/shm_slots.py, server/engine_link.py). The engine's side
of a pair travels to the engine process over its control pipe; the front end's side
(`EngineEnds`) goes to the front end, in the supervisor's own process or in a spawned one.
A front end that is restarted is connected anew, with new slots and pipes.

Who owns what: the supervisor creates and unlinks the shared memory and starts, stops and
(if it must) kills the engine process; a front end only attaches to its slots and, when it
stops, tells the engine it is done. The engine exits once the control pipe is closed and
every front end is done or gone.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection

from engine.child_signals import start_shielded
from engine.config import EngineConfig
from engine.queue.engine_worker import run_engine_worker
from engine.shm_slots import SharedSlots, SlotLayout


@dataclass
class EngineEnds:
    """What one front end needs to reach one engine; picklable into a spawned process."""

    index: int  # the engine's index (its device's position in the device list)
    device: str
    shm_name: str
    layout: SlotLayout
    tasks: Connection
    replies: Connection
    pid: int  # the engine process's

    def close(self) -> None:
        """The supervisor's copies, once the front end that uses them holds its own."""
        self.tasks.close()
        self.replies.close()


class EngineHost:
    """In the supervisor: one engine process, started at once (it loads in the background)."""

    def __init__(self, index: int, config: EngineConfig, layout: SlotLayout, plugin: Callable | None = None):
        context = multiprocessing.get_context("spawn")  # a forked CUDA context is unusable
        self.index, self.device, self.layout = index, config.device, layout
        self._context = context
        self._slots: dict[int, SharedSlots] = {}  # by front end: the slots of its latest connection
        # Duplex: the engine says "ready" on it too, so that one still loading can be stopped at once.
        control_reader, self._control = context.Pipe()
        self._ready = False
        self._load_failure: str | None = None
        # Daemonic: should the supervisor end without stopping it, multiprocessing kills it at exit.
        self.process = context.Process(target=run_engine_worker, name=f"rose-engine-{index}", daemon=True,
                                       args=(config, control_reader, os.getpid(), plugin))
        try:
            start_shielded(self.process)
        finally:
            control_reader.close()
        self.pid = self.process.pid

    def connect(self, front_end: int) -> EngineEnds:
        """New slots and pipes between this engine and front end `front_end` (replacing any it had)."""
        slots = SharedSlots.create(self.layout)
        task_reader, task_writer = self._context.Pipe(duplex=False)
        reply_reader, reply_writer = self._context.Pipe(duplex=False)
        try:
            self._control.send(("attach", front_end, slots.name, self.layout, task_reader, reply_writer))
        except OSError:  # the engine is gone; the front end will see its pipes closed
            pass
        finally:
            # The engine holds its own copies now; without ours, either side's exit shows as EOF.
            task_reader.close()
            reply_writer.close()
        previous = self._slots.pop(front_end, None)
        if previous is not None:  # the engine keeps its mapping until it is done with the old front end
            previous.close()
        self._slots[front_end] = slots
        return EngineEnds(self.index, self.device, slots.name, self.layout, task_writer, reply_reader, self.pid)

    def is_ready(self) -> bool:
        """Whether the engine has loaded and warmed up. It says so once on the control pipe, or
        says ("failed", why) instead (see load_failure)."""
        try:
            while not self._ready and self._load_failure is None and self._control.poll():
                message = self._control.recv()
                self._ready = message == "ready"
                if not self._ready:
                    self._load_failure = message[1]
        except (EOFError, OSError):
            pass
        return self._ready

    def load_failure(self) -> str | None:
        """Why the engine could not load, once it has said so; None while loading or once ready."""
        self.is_ready()
        return self._load_failure

    def stop(self, timeout: float) -> None:
        """No more front ends: wait up to `timeout` s for the engine to finish theirs and exit, else
        kill it (at once if it is still loading: it holds no work, and it would read the control
        pipe only once loaded); free the shared memory."""
        loaded = self.is_ready()
        self._control.close()
        self.process.join(timeout if loaded else 0.0)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)
        for slots in self._slots.values():
            slots.close()
        self._slots.clear()


def exit_reason(code: int | None) -> str:
    """A process's exit code in words (None: it closed its pipe but has not exited yet)."""
    if code is None:
        return "its process closed its pipe"
    if code < 0:
        try:
            return f"its process was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"its process was killed by signal {-code}"
    return f"its process exited with status {code}"
