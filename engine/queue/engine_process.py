"""The main function of an engine process: one model on one device, for every front end.

The supervisor (server/engine_host.py) starts it with its control pipe and its board, and
hands it each front end over that pipe (engine/messages.py's Attach). It loads and warms up
the model, says "ready" on the control pipe (or ("failed", why), and then tells each front
end so), and serves the front ends' pieces through one queue (engine/queue/engine_loop.py)
until the supervisor closes the control pipe and every front end is done or gone.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from multiprocessing.connection import Connection

from engine.board import EngineBoard
from engine.child_signals import STOP_SIGNALS, unshield
from engine.config import EngineConfig
from engine.parent_watch import exit_with_parent
from engine.queue.engine_loop import EngineLoop, refuse_front_ends


def run_engine_process(config: EngineConfig, control: Connection, board_name: str, max_queued_tokens: int | None,
                       parent_pid: int, plugin: Callable | None = None) -> None:
    """`parent_pid` is the supervisor that started this process."""
    # Ctrl-C, a hang-up, and SIGTERM from systemd or `timeout`, reach the whole process group;
    # the front ends still have requests to drain, so the supervisor alone decides when engines
    # stop (by closing the control pipe once they are done). Only SIGKILL ends one from outside.
    unshield(ignore=STOP_SIGNALS)
    # A supervisor that died without a word (SIGKILL) leaves nobody to serve, even mid-load.
    exit_with_parent(parent_pid, lambda: os._exit(1))
    try:
        engine = load_engine(config, plugin)
    except Exception as exc:
        why = f"{type(exc).__name__}: {exc}"
        _send(control, ("failed", why))  # the supervisor stops the server rather than restart front ends
        refuse_front_ends(control, why)
        return
    _send(control, "ready")
    board = EngineBoard.attach(board_name)
    try:
        EngineLoop(engine, control, board, (config.max_batch_tokens, config.max_batch_seqs), max_queued_tokens).run()
    finally:
        board.close()


def load_engine(config: EngineConfig, plugin: Callable | None = None):
    """The model loaded and warm on its device; `plugin` (fault injection in tests) wraps it after warm-up."""
    import torch

    from engine.rose.engine import Engine

    if config.device.startswith("cuda"):
        # Before anything touches CUDA: pinned buffers and graphs belong to this device only.
        # A bare "cuda" means the current device, as everywhere else in torch.
        torch.cuda.set_device(torch.device(config.device).index or 0)
    engine = Engine(config)
    engine.warm_up()
    if plugin is not None:  # after warm-up, so that injected faults hit requests only
        plugin(engine)
    return engine


def _send(conn: Connection, message) -> None:
    try:
        conn.send(message)
    except OSError:  # the supervisor is gone
        pass
