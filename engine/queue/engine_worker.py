"""The main function of an engine process: one model on one device, for every front end.

The supervisor (server/supervisor.py, through server/engine_host.py) starts it with one pipe
of its own, the control pipe, and hands it each front end's connection over that pipe:
("attach", front_end, shm_name, layout, tasks, replies); the engine says "ready" on it once. A restarted front end is attached
anew, with new slots and pipes. The engine loads and warms up the model, says "ready" to
every front end attached (and to each one attached later), then serves batches in the order
they come, from whichever front end sends them (`connection.wait` over all the task pipes),
so the device stays busy while any front end has work. With two device batches in flight,
the batches that arrive meanwhile wait, and are then joined into as few device batches as
the budget allows (engine/queue/joined_batches.py). One thread launches batches and another waits
for their vectors, so batch N+1 is launched while batch N is read back. Each front end gets
its replies in the order it sent its tasks. The engine exits once the supervisor has closed
the control pipe and every front end is done or gone.

Messages on each front end's pipes (small tuples; the arrays themselves live in shared
memory, engine/shm_slots.py):
  front end -> engine: (slot, num_tokens, num_seqs, max_seqlen, num_outputs), or None: this front end
                       is done (num_outputs: None for one vector per sequence, else the vectors
                       the batch's segments pool)
  engine -> front end: ("ready", info: pid, dtype, attention table) or ("failed", why), once at
                       start; then per task
                       (slot, compute_seconds, error or None, (graph_replays, eager_runs,
                       capture_failures, device_bytes_allocated, device_bytes_reserved))
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait

from engine.child_signals import STOP_SIGNALS, unshield
from engine.config import EngineConfig
from engine.queue.joined_batches import Task, device_batch, group_tasks, rows_per_task
from engine.memory import HeapTrimmer
from engine.parent_watch import exit_with_parent
from engine.shm_slots import SharedSlots


@dataclass(eq=False)
class _FrontEnd:
    """One attached front end, as the engine sees it."""

    index: int
    slots: SharedSlots
    tasks: Connection
    replies: Connection


def run_engine_worker(config: EngineConfig, control: Connection, parent_pid: int,
                      plugin: Callable | None = None) -> None:
    """`control` brings the front ends to serve; `parent_pid` is the supervisor that started this process."""
    # Ctrl-C, a hang-up, and SIGTERM from systemd or `timeout`, reach the whole process group;
    # the front ends still have requests to drain, so the supervisor alone decides when engines
    # stop (by closing the control pipe once they are done). Only SIGKILL ends one from outside.
    unshield(ignore=STOP_SIGNALS)
    # A supervisor that died without a word (SIGKILL) leaves nobody to serve, even mid-load.
    exit_with_parent(parent_pid, lambda: os._exit(1))
    try:
        engine = _load(config, plugin)
    except Exception as exc:
        why = f"{type(exc).__name__}: {exc}"
        _send(control, ("failed", why))  # the supervisor stops the server rather than restart front ends
        _refuse_front_ends(control, why)
        return
    _send(control, "ready")
    ready = ("ready", {"pid": os.getpid(), "dtype": str(engine.dtype).removeprefix("torch."),
                       "attention": _attention_table(engine)})
    launched: queue.SimpleQueue = queue.SimpleQueue()
    room = threading.Semaphore(DEVICE_BATCHES_IN_FLIGHT)
    reader = threading.Thread(target=_send_results, args=(engine, launched, room), name="rose-readback", daemon=True)
    reader.start()
    front_ends: dict[Connection, _FrontEnd] = {}  # by task pipe: the front ends still sending
    budget = (config.max_batch_tokens, config.max_batch_seqs)
    while control is not None or front_ends:
        tasks, done = [], []
        for conn in wait([*front_ends, *([control] if control is not None else [])]):
            if conn is not control:
                _receive_task(front_ends, conn, tasks, done)
                continue
            attached = _receive_front_end(control)
            if attached is None:
                control = None  # the supervisor is done: serve the front ends left, then exit
            elif _send(attached.replies, ready):
                front_ends[attached.tasks] = attached
        if tasks:
            room.acquire()  # while the device is busy, what the front ends send meanwhile waits here
            for conn in wait(list(front_ends), 0):  # ... and joins these
                _receive_task(front_ends, conn, tasks, done)
            for n, group in enumerate(group_tasks(tasks, *budget)):
                if n:
                    room.acquire()
                _launch(engine, group, launched, room)
        for front_end in done:  # after the batches it sent: its ends close once their replies are out
            launched.put(_Done(front_end))
    launched.put(None)
    reader.join(10)


# Device batches launched and not yet read back: one computing and one queued behind it keep
# the device busy; the batches that arrive meanwhile wait in their pipes, to be joined into the
# next device batch instead of queuing as many small ones.
DEVICE_BATCHES_IN_FLIGHT = 2


def _receive_task(front_ends: dict[Connection, _FrontEnd], conn: Connection, tasks: list[Task],
                  done: list[_FrontEnd]) -> None:
    """The front end's next message: a task (added to `tasks`), or its end (added to `done`)."""
    front_end = front_ends[conn]
    try:
        message = conn.recv()
    except (EOFError, OSError):
        message = None  # that front end is gone
    if message is None:
        del front_ends[conn]
        done.append(front_end)
        return
    slot, num_tokens, num_seqs, max_seqlen, num_outputs = message
    try:
        tasks.append(Task(front_end, slot, front_end.slots.read_batch(slot, num_tokens, num_seqs, max_seqlen,
                                                                      num_outputs)))
    except Exception as exc:  # fails this task alone, in its turn
        tasks.append(Task(front_end, slot, None, exc))


@dataclass(eq=False)
class _Launched:
    """A device batch on its way: the tasks it joins, its lazy vectors (or why it failed). Each
    holds one of the device's places until the readback thread has its vectors."""

    group: list[Task]
    lazy: object
    started: float


@dataclass(eq=False)
class _Done:
    """A front end that sends nothing more: its ends close once its replies are out."""

    front_end: _FrontEnd


def _launch(engine, group: list[Task], launched: queue.SimpleQueue, room: threading.Semaphore) -> None:
    """Launch the group as one device batch, holding one place in `room`."""
    started = time.perf_counter()
    try:
        lazy = engine.execute_packed(device_batch(group))
    except Exception as exc:  # this batch fails; the engine serves on (SystemExit ends the process)
        if len(group) > 1:  # each task alone, so that one that fails fails only its own inputs
            for n, task in enumerate(group):
                if n:
                    room.acquire()
                _launch(engine, [task], launched, room)
            return
        lazy = exc
    launched.put(_Launched(group, lazy, started))


def _attention_table(engine) -> list[tuple[str, str, str]]:
    """The attention backend per class of batch, fixed at warm-up (for /metrics)."""
    table = getattr(getattr(engine, "runner", None), "attention_table", None)
    return table() if table is not None else []


def _receive_front_end(control: Connection) -> _FrontEnd | None:
    """The next front end the supervisor attaches; None once it has closed the control pipe."""
    try:
        _, index, shm_name, layout, tasks, replies = control.recv()
    except (EOFError, OSError):
        return None
    return _FrontEnd(index, SharedSlots.attach(shm_name, layout), tasks, replies)


def _refuse_front_ends(control: Connection, why: str) -> None:
    """The model failed to load: tell every front end the supervisor attaches, until it stops."""
    while (front_end := _receive_front_end(control)) is not None:
        _send(front_end.replies, ("failed", why))


def _send(conn: Connection, message) -> bool:
    try:
        conn.send(message)
        return True
    except OSError:  # that front end is gone already
        return False


def _load(config: EngineConfig, plugin: Callable | None):
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


def _send_results(engine, launched: queue.SimpleQueue, room: threading.Semaphore) -> None:
    # A CPU engine's activations live in this process's heap: keep it from growing (engine/memory.py).
    trimmer = HeapTrimmer() if engine.device.type == "cpu" else None
    stats_of = _Stats(engine)
    while (item := launched.get()) is not None:
        if isinstance(item, _Done):  # that front end's replies are all out
            item.front_end.tasks.close()
            item.front_end.replies.close()
            item.front_end.slots.close()
            continue
        error, rows = None, None
        if isinstance(item.lazy, Exception):
            error = f"{type(item.lazy).__name__}: {item.lazy}"
        else:
            try:
                rows = item.lazy.wait()
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
        room.release()  # the device is done with it
        seconds, stats = time.perf_counter() - item.started, stats_of.read()
        for task, own in rows_per_task(item.group, rows):
            if own is not None:
                task.front_end.slots.output(task.slot)[: len(own)] = own
            _send(task.front_end.replies, (task.slot, seconds, error, stats))
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
