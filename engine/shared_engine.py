"""One engine process shared by several front-end processes (`--frontend-workers K`).

The parent process (server/frontend_workers.py) starts one `SharedEngine` per device. It
creates, for each of the K front ends, a set of shared-memory slots and a pair of pipes,
and hands one front end's share (`FrontEndEnds`) to each front-end process. There,
`SharedEngines` turns those ends into `SharedEngineLink`s, which the front end's batcher
sees as ordinary replicas (engine/engine_link.py). The engine process
(engine/engine_worker.py) takes tasks from every front end in the order they come.

Who owns what: the parent creates and unlinks the shared memory and starts, waits for and
(if it must) kills the engine process; a front end only attaches to its slots and, when
it stops, tells the engine it is done. The engine exits once every front end is done or
gone.
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
from engine.data_parallel import EngineGroup
from engine.engine_link import EngineLink
from engine.engine_process import exit_reason, stop_process
from engine.engine_worker import run_engine_worker
from engine.shm_slots import SharedSlots, SlotLayout


@dataclass
class FrontEndEnds:
    """What one front-end process needs to reach one engine; picklable into a spawned process."""

    index: int  # the engine's index (its device's position in --devices)
    device: str
    shm_name: str
    layout: SlotLayout
    tasks: Connection
    replies: Connection
    pid: int  # the engine process's


class SharedEngine:
    """In the parent: one engine process serving `num_front_ends` front ends."""

    def __init__(self, index: int, config: EngineConfig, layout: SlotLayout, num_front_ends: int,
                 plugin: Callable | None = None):
        context = multiprocessing.get_context("spawn")  # a forked CUDA context is unusable
        self.index, self.device = index, config.device
        self.slots: list[SharedSlots] = []
        self._ends: list[FrontEndEnds] = []
        engine_side: list[Connection] = []
        try:
            for _ in range(num_front_ends):
                slots = SharedSlots.create(layout)
                self.slots.append(slots)
                task_reader, task_writer = context.Pipe(duplex=False)
                reply_reader, reply_writer = context.Pipe(duplex=False)
                engine_side += [task_reader, reply_writer]
                self._ends.append(FrontEndEnds(index, config.device, slots.name, layout, task_writer, reply_reader, 0))
            self.process = context.Process(
                target=run_engine_worker, name=f"rose-engine-{index}", daemon=True,
                args=(config, [s.name for s in self.slots], layout, engine_side[0::2], engine_side[1::2],
                      os.getpid(), plugin),
            )
            start_shielded(self.process)
        except BaseException:
            self._close_ends()
            for slots in self.slots:
                slots.close()
            raise
        finally:
            # The engine holds its ends now; without our copies, a front end's exit shows there as EOF.
            for conn in engine_side:
                conn.close()
        for ends in self._ends:
            ends.pid = self.process.pid

    def ends_for(self, front_end: int) -> FrontEndEnds:
        return self._ends[front_end]

    def release_front_end_ends(self) -> None:
        """Once every front end process has started (holding its own copies): close ours, so
        that the engine's exit shows in each front end as EOF and a front end's in the engine."""
        self._close_ends()

    def _close_ends(self) -> None:
        for ends in self._ends:
            ends.tasks.close()
            ends.replies.close()

    def exit_reason(self) -> str:
        return exit_reason(self.process.exitcode)

    def stop(self, timeout: float) -> None:
        """Wait up to `timeout` s for the engine to exit (it does once its front ends are done), else
        kill it; free the shared memory."""
        self._close_ends()
        stop_process(self.process, timeout)
        for slots in self.slots:
            slots.close()


class SharedEngineLink(EngineLink):
    """In a front-end process: its link to an engine the parent started."""

    def __init__(self, ends: FrontEndEnds):
        super().__init__(ends.index, ends.device, SharedSlots.attach(ends.shm_name, ends.layout),
                         ends.tasks, ends.replies)
        self.pid = ends.pid

    def _kill(self) -> None:
        # Stuck for every front end alike; the others see its pipes close and retire it too.
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def shutdown(self, timeout: float = 5.0) -> None:
        """This front end is done: tell the engine, close the pipes and let go of the slots."""
        if self._tasks.closed:
            return
        self.stop_serving()
        self._tasks.close()
        self._replies.close()
        self.slots.close()


class SharedEngines(EngineGroup):
    """A front-end process's engines: like an EngineGroup, but started by the parent, shared with
    the other front ends; `start` only waits until each is warm."""

    def __init__(self, config: EngineConfig, ends: list[FrontEndEnds]):
        super().__init__(config, tuple(e.device for e in ends))
        self._ends = ends

    def start(self, ready_timeout: float = 900.0) -> None:
        try:
            for ends in self._ends:
                self.replicas.append(SharedEngineLink(ends))
            for replica in self.replicas:
                replica.wait_ready(ready_timeout)
        except BaseException:
            self.shutdown()
            raise

    def shutdown(self, timeout: float = 5.0) -> None:
        for replica in self.replicas:
            replica.shutdown(timeout)
