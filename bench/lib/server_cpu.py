"""A running server's CPU by role, sampled in a thread, so that a benchmark can read the cores each role kept
busy over a window it only knows afterwards (bench/lib/traffic.py's steady window). Measures nothing by
itself.

Roles come from `/health` (front ends and engines by pid; with one front end it runs in the supervisor's
process, which /health then lists none of); every other process under the supervisor (the supervisor beside
front ends of its own, the part processes, the resource tracker) is "other". Each process is read alone
(/proc/<pid>/stat, all its threads), so a role's figure holds none of another's. The machine's busy time
(/proc/stat) is sampled beside them: the clients and anything else running count there.
"""

from __future__ import annotations

import bisect
import threading
import time
from typing import Self

import httpx

from bench.lib.common import descendants, machine_busy_seconds, own_cpu_seconds

ROLES = ("front ends", "engines", "other", "machine")


class ServerCpu:
    def __init__(self, url: str, supervisor: int, interval: float = 0.1):
        health = httpx.get(url + "/health", timeout=10).json()
        front_ends = [entry["pid"] for entry in health.get("frontends", [])] or [supervisor]
        engines = [entry["pid"] for entry in health.get("engines", [])]
        self.roles = {pid: "other" for pid in [supervisor, *descendants(supervisor)]}
        self.roles.update({pid: "front ends" for pid in front_ends} | {pid: "engines" for pid in engines})
        self.num_front_ends = len(front_ends)
        self.interval = interval
        self.samples: list[tuple[float, dict[str, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="server-cpu", daemon=True)

    def sample(self) -> tuple[float, dict[str, float]]:
        """(time.monotonic(), CPU seconds so far by role, and of the whole machine)."""
        seconds = dict.fromkeys(ROLES, 0.0)
        for pid, role in self.roles.items():
            seconds[role] += own_cpu_seconds(pid)
        seconds["machine"] = machine_busy_seconds()
        return time.monotonic(), seconds

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(self.sample())
            self._stop.wait(self.interval)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append(self.sample())

    def cores(self, opened: float, closed: float) -> dict[str, float]:
        """Cores each role kept busy on average from `opened` to `closed` (time.monotonic()), read between the
        last sample at or before the one and the first at or after the other."""
        times = [at for at, _ in self.samples]
        first = self.samples[max(0, bisect.bisect_right(times, opened) - 1)]
        last = self.samples[min(len(times) - 1, bisect.bisect_left(times, closed))]
        elapsed = last[0] - first[0]
        if elapsed <= 0:
            return dict.fromkeys(ROLES, 0.0)
        return {role: (last[1][role] - first[1][role]) / elapsed for role in ROLES}
