"""The main function of an engine process (`--data-parallel N`): one model on one device.

The front end (engine/engine_process.py) starts it with multiprocessing's spawn. It loads
and warms up the model, says "ready", then serves batches until told to stop or until its
task pipe closes (the front end is gone). As in the single-process server, one thread
launches batches and another waits for their vectors, so batch N+1 is launched while
batch N is read back. Replies come in the order the tasks came.

Messages (small tuples; the arrays themselves live in shared memory, engine/shm_slots.py):
  front end -> engine: (slot, num_tokens, num_seqs, max_seqlen), or None to stop
  engine -> front end: ("ready", info) or ("failed", why), once at start; then per task
                       (slot, compute_seconds, error or None, (graph_replays, eager_runs,
                       device_bytes_allocated, device_bytes_reserved))
"""

from __future__ import annotations

import os
import queue
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection

from engine.config import EngineConfig
from engine.shm_slots import SharedSlots, SlotLayout


def run_engine_worker(config: EngineConfig, shm_name: str, layout: SlotLayout, tasks: Connection,
                      replies: Connection, plugin: Callable | None = None) -> None:
    # Ctrl-C, and SIGTERM from systemd or `timeout`, reach the whole process group; the front
    # end still has requests to drain, so it alone decides when engines stop (or its pipe
    # closing does, if it dies). Only SIGKILL ends an engine from outside.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        engine = _load(config, plugin)
        slots = SharedSlots.attach(shm_name, layout)
    except Exception as exc:
        replies.send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    replies.send(("ready", {"pid": os.getpid(), "dtype": str(engine.dtype).removeprefix("torch.")}))
    launched: queue.SimpleQueue = queue.SimpleQueue()
    reader = threading.Thread(target=_send_results, args=(engine, slots, launched, replies),
                              name="rose-readback", daemon=True)
    reader.start()
    while True:
        try:
            task = tasks.recv()
        except (EOFError, OSError):
            break  # the front end is gone
        if task is None:
            break
        slot, num_tokens, num_seqs, max_seqlen = task
        started = time.perf_counter()
        try:
            lazy = engine.execute_packed(slots.read_batch(slot, num_tokens, num_seqs, max_seqlen))
        except Exception as exc:  # this batch fails; the engine serves on (SystemExit ends the process)
            lazy = exc
        launched.put((slot, num_seqs, lazy, started))
    launched.put(None)
    reader.join(10)


def _load(config: EngineConfig, plugin: Callable | None):
    import torch

    from engine.engine import Engine

    if config.device.startswith("cuda"):
        # Before anything touches CUDA: pinned buffers and graphs belong to this device only.
        torch.cuda.set_device(config.device)
    engine = Engine(config)
    engine.warm_up()
    if plugin is not None:  # after warm-up, so that injected faults hit requests only
        plugin(engine)
    return engine


def _send_results(engine, slots: SharedSlots, launched: queue.SimpleQueue, replies: Connection) -> None:
    while (item := launched.get()) is not None:
        slot, num_seqs, lazy, started = item
        error = None
        if isinstance(lazy, Exception):
            error = f"{type(lazy).__name__}: {lazy}"
        else:
            try:
                slots.output(slot)[:num_seqs] = lazy.wait()
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
        try:
            replies.send((slot, time.perf_counter() - started, error, _stats(engine)))
        except (BrokenPipeError, OSError):
            return  # the front end is gone


def _stats(engine) -> tuple[int, int, int, int]:
    runner = getattr(engine, "runner", None)
    allocated = reserved = 0
    if engine.device.type == "cuda":
        import torch

        allocated, reserved = torch.cuda.memory_allocated(engine.device), torch.cuda.memory_reserved(engine.device)
    return (getattr(runner, "num_graph_replays", 0), getattr(runner, "num_eager_runs", 0), allocated, reserved)
