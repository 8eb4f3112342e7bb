"""EngineEnds: what one front end needs to reach one engine, made by the supervisor
(server/processes/engine_host.py) and picklable into a spawned front end."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from multiprocessing.connection import Connection

from rose_embed.engine.contract.arena import ArenaLayout


@dataclass
class EngineEnds:
    """What one front end needs to reach one engine; picklable into a spawned process."""

    index: int  # the engine's index (its device's position in the device list)
    device: str
    arena: str  # the shared-memory block's name
    layout: ArenaLayout
    board: str  # the engine's board's
    tasks: Connection
    replies: Connection
    pid: int  # the engine process's

    def close(self) -> None:
        """The supervisor's copies, once the front end that uses them holds its own."""
        self.tasks.close()
        self.replies.close()


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
