"""The CPUs this process may really use: its affinity mask, and its cgroup CPU quota (a
container's CPU limit), which the affinity mask does not show. Torch's own default thread
count and the core count Python reports read only the mask: a pod limited to 2 CPUs on a
128-core node would run 128 threads, throttled by the quota instead of running side by side.
"""

from __future__ import annotations

import os
from pathlib import Path


def available_cores() -> int:
    """The CPUs this process may really use, at least 1: the least of the affinity mask's size,
    the cgroup CPU quota in whole cores (a container's CPU limit; `cgroup_cpu_limit`) and, on
    Python 3.13+, `os.process_cpu_count()`. A pod limited to 4 CPUs on a 128-core node runs front
    ends and torch threads for 4: counted by the node's cores they would be throttled by the
    quota instead of running side by side."""
    counts = [len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
              cgroup_cpu_limit()]
    process_cpu_count = getattr(os, "process_cpu_count", None)  # 3.13+; honours PYTHON_CPU_COUNT
    if process_cpu_count is not None:
        counts.append(process_cpu_count())
    return max(1, min((n for n in counts if n), default=1))


def cgroup_cpu_limit(root: Path = Path("/")) -> int | None:
    """The cgroup CPU quota of this process in whole cores, rounded up (1.5 CPUs is 2); None where
    none is set or none can be read (a missing or unreadable file means no quota: detected, never
    assumed). `root` is the filesystem's root; tests pass a folder of fake files.

    cgroup v2: `cpu.max` is "max 100000" (none) or "QUOTA PERIOD" in microseconds. cgroup v1:
    `cpu.cfs_quota_us` (-1: none) over `cpu.cfs_period_us`. The process's cgroup comes from
    /proc/self/cgroup; a quota on it or on any cgroup above it binds, so the least one counts."""
    v2_path = v1_path = "/"
    for line in _read_text(root / "proc/self/cgroup").splitlines():
        hierarchy, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if hierarchy == "0" and not controllers:
            v2_path = path
        elif "cpu" in controllers.split(","):
            v1_path = path
    mount = root / "sys/fs/cgroup"
    limits = [_v2_limit(folder) for folder in _cgroup_folders(mount, v2_path)]
    for v1_mount in ("cpu", "cpu,cpuacct"):  # "cpu" is usually a link to "cpu,cpuacct"
        limits += [_v1_limit(folder) for folder in _cgroup_folders(mount / v1_mount, v1_path)]
    return min((n for n in limits if n is not None), default=None)


def _cgroup_folders(mount: Path, path: str) -> list[Path]:
    """The cgroup's folder under `mount`, then each folder above it up to the mount. A container
    without a cgroup namespace reads its host-side path in /proc/self/cgroup while its mount shows
    its own cgroup at the root: the deeper folders are then absent and the mount's root counts."""
    parts = [part for part in path.split("/") if part and part != ".."]
    return [mount.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]


def _v2_limit(folder: Path) -> int | None:
    fields = _read_text(folder / "cpu.max").split()
    if len(fields) != 2 or fields[0] == "max":
        return None
    return _whole_cores(fields[0], fields[1])


def _v1_limit(folder: Path) -> int | None:
    return _whole_cores(_read_text(folder / "cpu.cfs_quota_us"), _read_text(folder / "cpu.cfs_period_us"))


def _whole_cores(quota: str, period: str) -> int | None:
    try:
        quota_us, period_us = int(quota), int(period)
    except ValueError:
        return None
    if quota_us <= 0 or period_us <= 0:  # v1's -1: no quota
        return None
    return max(1, -(-quota_us // period_us))


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return ""
