"""The stats board: how the front ends of one server (`--frontend-workers K`) learn each other's figures.

A scrape of /metrics or /health reaches one front end, picked by the kernel, and each front end
counts only what passed through it. So every front end writes a report (its metric families,
whether it can serve, its view of the engines) to a file of its own in a directory that the
supervisor (server/processes/supervisor.py) creates for the server, every half second and whenever it
answers a scrape; the front end that answers a scrape reads every report and speaks for the
whole server (server/metrics/merge.py, server/metrics/health.py).

Files, not a shared-memory segment: a report is a few kilobytes of JSON, written to a temporary
file and renamed over the last one, so a reader sees the old report or the new one, never half
of one; no lock, no layout to agree on, nothing to resize when a metric gains a label. The
directory sits on tmpfs (/dev/shm) where there is one, so nothing reaches a disk.

One file per front-end index: a front end started in place of one that died takes over its
file, and carries its predecessor's counters in every report it writes, so that the sums never
go backwards. (Counts a crashed front end made after its last report, at most half a second's,
are lost.) The report of a front end that stopped stays, with the counts it made.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

import msgspec

from rose_embed.server.processes.pids import is_running

logger = logging.getLogger("rose_embed.server")

PUBLISH_EVERY_S = 0.5
STALE_AFTER_S = 3.0  # a front end silent this long is out, even if its process is still there (a blocked event loop)


class Family(msgspec.Struct, array_like=True):
    """One metric family as prometheus_client collects it; a value of None stands for NaN (JSON has none)."""

    name: str
    type: str
    documentation: str
    unit: str
    samples: list[tuple[str, dict[str, str], float | None]]


class Report(msgspec.Struct):
    """What one front end says of itself."""

    index: int
    pid: int
    updated: float  # time.time() of writing
    ready: bool  # loaded and warmed up (Runtime.is_ready)
    was_ready: bool  # it has been: not ready now means stopping, not starting
    problem: str | None  # why its engines cannot compute (the watchdog's word), or None
    restarts: int  # front ends that held this index before this one
    engines: list[dict[str, Any]] | None  # each engine as its /health would list it (None until ready)
    families: list[Family]


BOARD_PREFIX = "rose-embed-stats-"  # then the supervisor's pid: server/processes/stale_memory.py reads it


def create_board_dir() -> str:
    """The supervisor's part: a fresh, empty directory for one server's reports, named after it."""
    shm = Path("/dev/shm")
    return tempfile.mkdtemp(prefix=f"{BOARD_PREFIX}{os.getpid()}-",
                            dir=shm if shm.is_dir() and os.access(shm, os.W_OK) else None)


def remove_board_dir(directory: str) -> None:
    """The supervisor's part once every front end has stopped; an orphaned front end's too."""
    shutil.rmtree(directory, ignore_errors=True)


class StatsBoard:
    """One front end's handle on the board: it writes its own report and reads everyone's."""

    def __init__(self, directory: str, index: int):
        self.directory, self.index = Path(directory), index
        self._path = self.directory / f"frontend-{index}.json"
        self._write_failed = False
        # A report already in this front end's file was written by a front end it replaces.
        self.previous = _read(self._path)

    @property
    def restarts(self) -> int:
        return 0 if self.previous is None else self.previous.restarts + 1

    def publish(self, report: Report) -> None:
        temporary = self._path.with_name(f".{self._path.name}.{os.getpid()}.{threading.get_ident()}")
        try:
            temporary.write_bytes(msgspec.json.encode(report))
            os.replace(temporary, self._path)
        except FileNotFoundError:
            pass  # the directory is gone: so is the supervisor, and this front end is on its way out
        except OSError as exc:
            if not self._write_failed:
                logger.warning("cannot write this front end's report to %s: %s", self.directory, exc)
            self._write_failed = True

    def reports(self) -> list[Report]:
        """Every front end's last report, by index."""
        found = (_read(path) for path in self.directory.glob("frontend-*.json"))
        return sorted((r for r in found if r is not None), key=lambda r: r.index)


def _read(path: Path) -> Report | None:
    try:
        return msgspec.json.decode(path.read_bytes(), type=Report)
    except (OSError, msgspec.DecodeError):
        return None


def is_live(report: Report, now: float) -> bool:
    """Whether the front end that wrote it is still there and reporting."""
    return now - report.updated <= STALE_AFTER_S and is_running(report.pid)


def front_end_state(report: Report, now: float) -> tuple[str, str | None]:
    """("serving" | "starting" | "stopping" | "out", why it is out)."""
    if not is_running(report.pid):
        return "out", "its process is gone"
    if now - report.updated > STALE_AFTER_S:
        return "out", f"it has not reported for {now - report.updated:.0f} s"
    if not report.ready:
        return ("stopping" if report.was_ready else "starting"), None
    if report.problem is not None:
        return "out", report.problem
    return "serving", None
