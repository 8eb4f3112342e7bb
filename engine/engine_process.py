"""EngineProcess: the front end's handle on one engine process it owns (a replica of `--data-parallel`).

The process runs engine/engine_worker.py; batches and replies travel as in every engine
link (engine/engine_link.py). When the process exits, for whatever reason (killed,
crashed, out of memory), its exit is seen on the event loop through the process's
sentinel: its batches in flight fail, it leaves the rotation, and the others serve on.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
from collections.abc import Callable

from engine.child_signals import start_shielded
from engine.config import EngineConfig
from engine.engine_link import EngineLink
from engine.engine_worker import run_engine_worker
from engine.shm_slots import SharedSlots, SlotLayout


class EngineProcess(EngineLink):
    """Starts the process at once; `wait_ready` blocks until the model is loaded and warm."""

    def __init__(self, index: int, config: EngineConfig, layout: SlotLayout, plugin: Callable | None = None):
        context = multiprocessing.get_context("spawn")  # a forked CUDA context is unusable
        slots = SharedSlots.create(layout)
        task_reader, tasks = context.Pipe(duplex=False)
        replies, reply_writer = context.Pipe(duplex=False)
        super().__init__(index, config.device, slots, tasks, replies)
        # Daemonic: should this process end without stopping it, multiprocessing kills it at exit.
        self.process = context.Process(
            target=run_engine_worker, name=f"rose-engine-{index}", daemon=True,
            args=(config, [slots.name], layout, [task_reader], [reply_writer], os.getpid(), plugin),
        )
        try:
            start_shielded(self.process)
        except BaseException:
            slots.close()
            raise
        # The child holds the other ends now; closing ours makes its exit show as EOF here.
        task_reader.close()
        reply_writer.close()
        self.pid = self.process.pid
        self._closed = False

    def _watch_exit(self, loop: asyncio.AbstractEventLoop) -> None:
        loop.add_reader(self.process.sentinel, self._on_exit)

    def _unwatch_exit(self, loop: asyncio.AbstractEventLoop) -> None:
        loop.remove_reader(self.process.sentinel)

    def _is_alive(self) -> bool:
        return self.process.is_alive()

    def _kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()

    def _on_exit(self) -> None:
        self._read_replies()  # whatever it answered before it went
        self._lost(self._exit_reason())

    def _exit_reason(self, wait: float = 1.0) -> str:
        self.process.join(wait)  # its pipe closes as it exits; the exit code follows at once
        return exit_reason(self.process.exitcode)

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop the engine: ask, wait up to `timeout` s, then kill; free the shared memory."""
        if self._closed:
            return
        self._closed = True
        self.stop_serving()
        # One still loading holds no work to finish, and would read the request to stop only once loaded.
        stop_process(self.process, timeout if self.dtype is not None else 0.0)
        self._tasks.close()
        self._replies.close()
        self.slots.close()


def stop_process(process: multiprocessing.Process, timeout: float) -> None:
    """Wait up to `timeout` s for a process asked to stop, then kill it."""
    process.join(timeout)
    if process.is_alive():
        process.kill()
        process.join(5)


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
