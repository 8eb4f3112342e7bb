"""The main function of an engine process: every served model on one device, for every front end.

The supervisor (server/processes/engine_host.py) starts it with its control pipe and its board, and
hands it each front end over that pipe (engine/contract/messages.py's Attach). It loads and warms up
each model in turn (its own weights, graphs and buffers), says "ready" on the control pipe
(or ("failed", why), naming the model that did not load, and then tells each front end so),
and serves the front ends' pieces through one queue (engine/queue/engine_loop.py) until the
supervisor closes the control pipe and every front end is done or gone.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from multiprocessing.connection import Connection

from rose_embed.engine.contract.board import EngineBoard
from rose_embed.engine.contract.child_signals import STOP_SIGNALS, unshield
from rose_embed.engine.contract.config import EngineConfig
from rose_embed.engine.contract.parent_watch import exit_with_parent
from rose_embed.engine.contract import messages
from rose_embed.engine.contract.messages import Attach
from rose_embed.engine.queue.engine_loop import EngineLoop, queue_budget
from rose_embed.engine.rose.cublas_workspace import give_cublas_no_workspace


def run_engine_process(configs: list[EngineConfig], control: Connection, board_name: str,
                       parent_pid: int, plugin: Callable | None = None,
                       configure_logs: Callable[[], None] | None = None) -> None:
    """`configs`: one per served model, in the server's order, all on one device with one batch
    budget. `parent_pid` is the supervisor that started this process. `configure_logs` sets this
    (spawned) process's logging as the server's, so the engine's start-up lines (the dtype and why,
    int8's plan and compile time) reach the server's log."""
    if configure_logs is not None:
        configure_logs()
    # Ctrl-C, a hang-up, and SIGTERM from systemd or `timeout`, reach the whole process group;
    # the front ends still have requests to drain, so the supervisor alone decides when engines
    # stop (by closing the control pipe once they are done). Only SIGKILL ends one from outside.
    unshield(ignore=STOP_SIGNALS)
    # A supervisor that died without a word (SIGKILL) leaves nobody to serve, even mid-load.
    exit_with_parent(parent_pid, lambda: os._exit(1))
    try:
        engines = load_engines(configs, plugin)
    except Exception as exc:
        why = str(exc) if isinstance(exc, ModelLoadFailure) else f"{type(exc).__name__}: {exc}"
        _send(control, ("failed", why))  # the supervisor stops the server rather than restart front ends
        refuse_front_ends(control, why)
        return
    _send(control, "ready")
    board = EngineBoard.attach(board_name)
    try:
        EngineLoop(engines, control, board, queue_budget(engines, configs[0]), scheduling=configs[0].scheduling).run()
    finally:
        board.close()


class ModelLoadFailure(RuntimeError):
    """A model that could not be loaded or warmed up on this device; the message names it."""


def load_engines(configs: list[EngineConfig], plugin: Callable | None = None) -> list:
    """Every model loaded and warm on the device, in order. One that fails (its weights do not
    read, the device has no room left beside the models before it) stops the load, naming it."""
    engines = []
    for config in configs:
        try:
            engines.append(load_engine(config, plugin))
        except Exception as exc:
            held = sum(getattr(e, "weights_bytes", 0) for e in engines)
            beside = f" beside {len(engines)} model(s) holding {held / 2**20:.0f} MiB of weights" if engines else ""
            room = " (out of device memory)" if type(exc).__name__ == "OutOfMemoryError" else ""
            raise ModelLoadFailure(f"model {config.model or '(default)'} could not be loaded on {config.device}"
                                   f"{beside}{room}: {type(exc).__name__}: {exc}") from exc
    return engines


def load_engine(config: EngineConfig, plugin: Callable | None = None):
    """The model loaded and warm on its device; `plugin` (fault injection in tests) wraps it after warm-up."""
    import torch

    from rose_embed.engine.rose.engine import Engine

    if config.device.startswith("cuda"):
        give_cublas_no_workspace()
        # Before anything touches CUDA: pinned buffers and graphs belong to this device only.
        # A bare "cuda" means the current device, as everywhere else in torch.
        torch.cuda.set_device(torch.device(config.device).index or 0)
    engine = Engine(config)
    engine.warm_up()
    engine.measure_budget()
    if plugin is not None:  # after warm-up, so that injected faults hit requests only
        plugin(engine)
    return engine


def _send(conn: Connection, message) -> None:
    try:
        conn.send(message)
    except OSError:  # the supervisor is gone
        pass


def refuse_front_ends(control: Connection, why: str) -> None:
    """The model failed to load: tell every front end the supervisor attaches, until it stops."""
    while True:
        try:
            attach: Attach = control.recv()
        except (EOFError, OSError):
            return
        try:
            attach.replies.send_bytes(messages.encode(messages.LoadFailed(why)))
        except OSError:
            pass
        attach.tasks.close()
        attach.replies.close()
