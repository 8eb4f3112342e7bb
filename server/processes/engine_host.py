"""EngineHost: the supervisor's handle on one engine process, and EngineEnds, a front end's way in.

The supervisor (server/processes/supervisor.py) starts one engine process per device and connects
every front end to every engine: for each (engine, front end) pair a shared-memory arena
and a pair of pipes (engine/contract/arena.py, server/links/engine_link.py). The engine's side of a pair
travels to the engine process over its control pipe (engine/contract/messages.py's Attach); the
front end's side (`EngineEnds`) goes to the front end, in the supervisor's own process or in
a spawned one. A front end that is restarted is connected anew, with a new arena and pipes.
Every engine also has a board (engine/contract/board.py) that it writes and every front end reads.

Who owns what: the supervisor creates and unlinks the shared memory and starts, stops and
(if it must) kills the engine process; a front end only attaches to its arena and, when it
stops, tells the engine it is done. The engine exits once the control pipe is closed and
every front end is done or gone.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections.abc import Callable

from rose_embed.engine.contract.arena import Arena, ArenaLayout
from rose_embed.engine.contract.board import EngineBoard
from rose_embed.engine.contract.child_signals import start_shielded
from rose_embed.engine.contract.config import EngineConfig
from rose_embed.engine.contract.messages import Attach
from rose_embed.engine.queue.engine_process import run_engine_process
from rose_embed.server.links.engine_ends import EngineEnds


class EngineHost:
    """In the supervisor: one engine process, started at once (it loads in the background)."""

    def __init__(self, index: int, configs: list[EngineConfig], layout: ArenaLayout, plugin: Callable | None = None,
                 configure_logs: Callable[[], None] | None = None):
        """`configs`: one per served model, all on this engine's device; `configure_logs`: run first
        in the engine process (a picklable callable: the process is spawned)."""
        context = multiprocessing.get_context("spawn")  # a forked CUDA context is unusable
        self.index, self.device, self.layout = index, configs[0].device, layout
        self._context = context
        self._arenas: dict[int, Arena] = {}  # by front end: the arena of its latest connection
        self.board = EngineBoard.create()
        # The supervisor's threads (its main one, the keeper that restarts engines) connect front ends
        # and read the control pipe.
        self._lock = threading.RLock()
        # The engine process's arguments after its control pipe: the same for every restart.
        self._configs, self._args = configs, (self.board.name, os.getpid(), plugin, configure_logs)
        self.load_seconds: float | None = None  # how long the latest start took to be warm
        self._spawn()

    def _spawn(self) -> None:
        """A new engine process with a new control pipe; it loads in the background."""
        # Duplex: the engine says "ready" on it too, so that one still loading can be stopped at once.
        control_reader, self._control = self._context.Pipe()
        self._ready = False
        self._load_failure: str | None = None
        # Daemonic: should the supervisor end without stopping it, multiprocessing kills it at exit.
        self.process = self._context.Process(target=run_engine_process, name=f"rose-engine-{self.index}", daemon=True,
                                             args=(self._configs, control_reader, *self._args))
        self._spawned_at = time.monotonic()
        try:
            start_shielded(self.process)
        finally:
            control_reader.close()
        self.pid = self.process.pid

    def restart(self) -> None:
        """After the engine process died: a new one with the same models (server/processes/engine_keeper.py
        then connects every front end to it). The board's counters carry on; what described the dead
        process's work now does not hold."""
        with self._lock:
            self._control.close()
            for field in ("busy_since", "queued_tokens", "queued_pieces", "tokens_per_second"):
                self.board[field] = 0.0
            self._spawn()

    def connect(self, front_end: int) -> EngineEnds:
        """A new arena and pipes between this engine and front end `front_end` (replacing any it had)."""
        with self._lock:
            return self._connect(front_end)

    def _connect(self, front_end: int) -> EngineEnds:
        arena = Arena.create(self.layout)
        task_reader, task_writer = self._context.Pipe(duplex=False)
        reply_reader, reply_writer = self._context.Pipe(duplex=False)
        try:
            self._control.send(Attach(front_end, arena.name, self.layout, task_reader, reply_writer))
        except OSError:  # the engine is gone; the front end will see its pipes closed
            pass
        finally:
            # The engine holds its own copies now; without ours, either side's exit shows as EOF.
            task_reader.close()
            reply_writer.close()
        previous = self._arenas.pop(front_end, None)
        if previous is not None:  # the engine keeps its mapping until it is done with the old front end
            previous.close()
        self._arenas[front_end] = arena
        return EngineEnds(self.index, self.device, arena.name, self.layout, self.board.name, task_writer, reply_reader,
                          self.pid)

    def is_ready(self) -> bool:
        """Whether the engine has loaded and warmed up. It says so once on the control pipe, or
        says ("failed", why) instead (see load_failure)."""
        with self._lock:
            return self._read_control()

    def _read_control(self) -> bool:
        try:
            while not self._ready and self._load_failure is None and self._control.poll():
                message = self._control.recv()
                self._ready = message == "ready"
                if self._ready:
                    self.load_seconds = time.monotonic() - self._spawned_at
                else:
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
        for arena in self._arenas.values():
            arena.close()
        self._arenas.clear()
        self.board.close()
