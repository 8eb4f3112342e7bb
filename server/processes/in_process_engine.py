"""An engine object served in a thread of the front end's own process (tests, programs that embed
the app with an `Engine`), over the same arena, board and messages as an engine process, so
that the front end cannot tell the difference.
"""

from __future__ import annotations

import os
import threading
from multiprocessing import Pipe
from typing import TYPE_CHECKING

from rose_embed.engine.contract.arena import Arena, ArenaLayout
from rose_embed.engine.contract.board import EngineBoard
from rose_embed.engine.contract.config import EngineConfig
from rose_embed.engine.contract.messages import Attach
from rose_embed.engine.model_files.clip import pixel_floats_per_token
from rose_embed.engine.queue.engine_loop import EngineLoop, queue_budget
from rose_embed.server.links.engine_ends import EngineEnds

if TYPE_CHECKING:
    from rose_embed.engine.rose.engine import Engine


class InProcessEngine:
    """The engine loop (engine/queue/engine_loop.py) in a thread; `ends` is the front end's way in.
    The loop ends once the front end says goodbye; if the thread dies instead, its pipes close and
    the front end sees the engine go, as it would a process."""

    def __init__(self, engine, budget: tuple[int, int], index: int = 0, scheduling: str = "fair"):
        """`engine`: one engine per served model, in order (a single one: one model). `budget`: a
        batch's most tokens and vectors, as the server cuts its pieces. `scheduling`: how the queue
        fills a batch (engine/queue/piece_queue.py)."""
        engines = list(engine) if isinstance(engine, (list, tuple)) else [engine]
        engine = engines[0]
        # A sequence longer than the budget goes alone into a batch: the arena holds a few of those too.
        longest = max(budget[0], *(getattr(e.spec, "max_seq_len", 0) for e in engines))
        layout = ArenaLayout.for_budget(longest, budget[1], max(e.spec.embedding_dim for e in engines),
                                        pixel_floats_per_token([e.spec for e in engines]))
        self._arena, self._board = Arena.create(layout), EngineBoard.create()
        task_reader, task_writer = Pipe(duplex=False)
        reply_reader, reply_writer = Pipe(duplex=False)
        self._engine_side = (task_reader, reply_writer)
        self.ends = EngineEnds(index, str(getattr(engine, "device", "cpu")), self._arena.name, layout, self._board.name,
                               task_writer, reply_reader, os.getpid())
        attach = Attach(0, self._arena.name, layout, task_reader, reply_writer)
        self._loop = EngineLoop(engines, None, EngineBoard.attach(self._board.name), budget, (attach,), scheduling)
        self.thread = threading.Thread(target=self._run, name="rose-engine", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        try:
            self._loop.run()
        except BaseException:  # SystemExit and the like end a plain thread: the engine is dead
            pass
        finally:
            for conn in self._engine_side:
                conn.close()

    def close(self, timeout: float | None = 5.0) -> None:
        """After the front end's goodbye: wait for the loop (not for ever: a stuck kernel never
        returns), then free the shared memory. A front end that never attached (stopped as the
        engine started) sends no goodbye: the end of its task pipe, closed here, says it instead."""
        self.ends.tasks.close()
        self.thread.join(timeout)
        if not self.thread.is_alive():
            self._loop.board.close()
            self._arena.close()
            self._board.close()


def load_engine(config: EngineConfig) -> Engine:
    """An `Engine` for one served model, loaded in this process. Imported here, not at the top: a
    front end of engine processes needs no torch."""
    from rose_embed.engine.rose.engine import Engine

    return Engine(config)


def serve_in_thread(engines: list[Engine], config: EngineConfig) -> InProcessEngine:
    """The engines behind a queue in a thread of this process, its batches cut as an engine process
    cuts them (engine/queue/engine_loop.py's queue_budget)."""
    return InProcessEngine(engines, queue_budget(engines, config), scheduling=config.scheduling)
