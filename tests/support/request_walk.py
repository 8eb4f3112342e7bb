"""The walk of one request through the package's code: which package calls which, in order.

A profiler (sys.setprofile, and threading.setprofile for the threads the app starts) notes every
call from one package of rose_embed into another while one request is served in process. A
crossing is one function's call into another package's function, counted once however often it
is made (a property read six times, a loop that polls) and however often a coroutine or
generator resumes; the way back is not counted again. So the count is the path's, not the
clock's: it does not change with timing. A package is a top-level part (compat, corpus) or a sub-package of
server or engine (server.routes, server.pipeline, engine.contract, ...); server's own modules
(app, config, runtime) are the package "server". The engine's thread is left out: there the
tests' fake engine stands in for ROSE, so its walk says nothing of the real one.
"""

from __future__ import annotations

import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from collections.abc import Iterator

ROOT = "rose_embed."
_SPLIT = ("server", "engine")  # the packages whose sub-packages count as packages of their own
_ENGINE_THREADS = ("rose-engine", "rose-readback")


def package_of(module: str) -> str | None:
    """The package a module belongs to, for the walk; None outside rose_embed."""
    if not module.startswith(ROOT):
        return None
    parts = module[len(ROOT):].split(".")
    if parts[0] in _SPLIT and len(parts) > 2:
        return ".".join(parts[:2])
    return parts[0]


@dataclass(frozen=True)
class Crossing:
    thread: str
    caller: str  # package.function
    callee: str

    def __str__(self) -> str:
        return f"{self.caller} -> {self.callee}"


@dataclass
class Walk:
    crossings: list[Crossing] = field(default_factory=list)
    is_recording: bool = False
    _seen: list = field(default_factory=list)  # frames already counted, held so that their ids stay theirs
    _seen_ids: set[int] = field(default_factory=set)

    def packages(self) -> list[str]:
        """The packages in the order the crossings enter them, starting where the first one leaves."""
        if not self.crossings:
            return []
        path = [_package(self.crossings[0].caller)]
        for crossing in self.crossings:
            if _package(crossing.caller) != path[-1]:
                path.append(_package(crossing.caller))
            path.append(_package(crossing.callee))
        return path

    def profile(self, frame, event, arg):
        if event != "call" or not self.is_recording:
            return
        callee = package_of(frame.f_globals.get("__name__", ""))
        if callee is None or id(frame) in self._seen_ids:
            return
        thread = threading.current_thread().name
        if thread.startswith(_ENGINE_THREADS):
            return
        self._seen.append(frame)
        self._seen_ids.add(id(frame))
        caller_frame = frame.f_back
        while caller_frame is not None and package_of(caller_frame.f_globals.get("__name__", "")) is None:
            caller_frame = caller_frame.f_back
        if caller_frame is None:
            return  # a task's or a thread's first frame: entered from the event loop or a pool, not a package
        caller = package_of(caller_frame.f_globals["__name__"])
        if caller != callee:
            crossing = Crossing(thread, f"{caller}.{caller_frame.f_code.co_name}", f"{callee}.{frame.f_code.co_name}")
            if crossing not in self.crossings:
                self.crossings.append(crossing)


def _package(name: str) -> str:
    return name.rsplit(".", 1)[0]


@contextmanager
def profiled() -> Iterator[Walk]:
    """A Walk whose profiler runs in this thread and every thread started meanwhile; it notes
    crossings only while `is_recording`."""
    walk = Walk()
    threading.setprofile(walk.profile)
    sys.setprofile(walk.profile)
    try:
        yield walk
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
