"""The main function of an engine process: one model on one device, for one or several front ends.

With `--data-parallel N` the one front end starts it (engine/engine_process.py); with
`--frontend-workers K` the parent process does (engine/shared_engine.py) and it serves K
front-end processes, each through its own slots and its own pair of pipes. It loads and
warms up the model, says "ready" to every front end, then serves batches until every
front end has said it is done or closed its task pipe (it is gone). Tasks are taken in
the order they come, from whichever front end sends them (`connection.wait` over all the
task pipes), so the device stays busy while any front end has work. As in the
single-process server, one thread launches batches and another waits for their vectors,
so batch N+1 is launched while batch N is read back. Each front end gets its replies in
the order it sent its tasks.

Messages on each front end's pipes (small tuples; the arrays themselves live in shared
memory, engine/shm_slots.py):
  front end -> engine: (slot, num_tokens, num_seqs, max_seqlen), or None: this front end is done
  engine -> front end: ("ready", info) or ("failed", why), once at start; then per task
                       (slot, compute_seconds, error or None, (graph_replays, eager_runs,
                       capture_failures, device_bytes_allocated, device_bytes_reserved))
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection, wait

from engine.child_signals import STOP_SIGNALS, unshield
from engine.config import EngineConfig
from engine.memory import HeapTrimmer
from engine.parent_watch import exit_with_parent
from engine.shm_slots import SharedSlots, SlotLayout


def run_engine_worker(config: EngineConfig, shm_names: list[str], layout: SlotLayout, tasks: list[Connection],
                      replies: list[Connection], parent_pid: int, plugin: Callable | None = None) -> None:
    """Front end i writes its batches into the slots named `shm_names[i]`, sends tasks on
    `tasks[i]` and reads replies on `replies[i]`; `parent_pid` is the process that started this one."""
    # Ctrl-C, a hang-up, and SIGTERM from systemd or `timeout`, reach the whole process group;
    # the front ends still have requests to drain, so they alone decide when engines stop (or
    # their pipes closing does, if they die). Only SIGKILL ends an engine from outside.
    unshield(ignore=STOP_SIGNALS)
    # A parent that died without a word (SIGKILL) leaves nobody to serve, even mid-load.
    exit_with_parent(parent_pid, lambda: os._exit(1))
    try:
        engine = _load(config, plugin)
        slots = [SharedSlots.attach(name, layout) for name in shm_names]
    except Exception as exc:
        _send_to_all(replies, ("failed", f"{type(exc).__name__}: {exc}"))
        return
    _send_to_all(replies, ("ready", {"pid": os.getpid(), "dtype": str(engine.dtype).removeprefix("torch.")}))
    launched: queue.SimpleQueue = queue.SimpleQueue()
    reader = threading.Thread(target=_send_results, args=(engine, slots, launched, replies),
                              name="rose-readback", daemon=True)
    reader.start()
    front_end_of = {conn: i for i, conn in enumerate(tasks)}  # the front ends still sending
    while front_end_of:
        for conn in wait(list(front_end_of)):
            try:
                task = conn.recv()
            except (EOFError, OSError):
                task = None  # that front end is gone
            if task is None:
                del front_end_of[conn]
                continue
            i = front_end_of[conn]
            slot, num_tokens, num_seqs, max_seqlen = task
            started = time.perf_counter()
            try:
                lazy = engine.execute_packed(slots[i].read_batch(slot, num_tokens, num_seqs, max_seqlen))
            except Exception as exc:  # this batch fails; the engine serves on (SystemExit ends the process)
                lazy = exc
            launched.put((i, slot, num_seqs, lazy, started))
    launched.put(None)
    reader.join(10)


def _send_to_all(replies: list[Connection], message: tuple) -> None:
    for conn in replies:
        try:
            conn.send(message)
        except OSError:  # that front end is gone already
            pass


def _load(config: EngineConfig, plugin: Callable | None):
    import torch

    from engine.engine import Engine

    if config.device.startswith("cuda"):
        # Before anything touches CUDA: pinned buffers and graphs belong to this device only.
        # A bare "cuda" means the current device, as everywhere else in torch.
        torch.cuda.set_device(torch.device(config.device).index or 0)
    engine = Engine(config)
    engine.warm_up()
    if plugin is not None:  # after warm-up, so that injected faults hit requests only
        plugin(engine)
    return engine


def _send_results(engine, slots: list[SharedSlots], launched: queue.SimpleQueue, replies: list[Connection]) -> None:
    # A CPU engine's activations live in this process's heap: keep it from growing (engine/memory.py).
    trimmer = HeapTrimmer() if engine.device.type == "cpu" else None
    stats = _Stats(engine)
    while (item := launched.get()) is not None:
        i, slot, num_seqs, lazy, started = item
        error = None
        if isinstance(lazy, Exception):
            error = f"{type(lazy).__name__}: {lazy}"
        else:
            try:
                slots[i].output(slot)[:num_seqs] = lazy.wait()
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
        try:
            replies[i].send((slot, time.perf_counter() - started, error, stats.read()))
        except OSError:
            pass  # that front end is gone; the others are still served
        if trimmer is not None:
            trimmer.maybe_trim()


class _Stats:
    """What each reply carries about the engine: graph replays, eager runs and device memory.

    The memory figures are read at most every `memory_interval` s: torch.cuda.memory_allocated
    builds the allocator's whole statistics dict (~0.6 ms), which on this thread delayed
    every reply (py-spy on the H200: 4 % of all samples, 20 % of this thread's time).
    """

    def __init__(self, engine, memory_interval: float = 0.5):
        self.engine, self.memory_interval = engine, memory_interval
        self._memory, self._memory_read = (0, 0), float("-inf")

    def read(self) -> tuple[int, int, int, int, int]:
        runner = getattr(self.engine, "runner", None)
        now = time.perf_counter()
        if self.engine.device.type == "cuda" and now - self._memory_read >= self.memory_interval:
            import torch

            self._memory_read = now
            self._memory = (torch.cuda.memory_allocated(self.engine.device),
                            torch.cuda.memory_reserved(self.engine.device))
        return (getattr(runner, "num_graph_replays", 0), getattr(runner, "num_eager_runs", 0),
                getattr(runner, "num_capture_failures", 0), *self._memory)
