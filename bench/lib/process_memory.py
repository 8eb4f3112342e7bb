"""The resident set of each process of a running server, by role, sampled over time: what the
soak judges. Measures nothing by itself; bench/soak.py drives it.

A sum over processes hides one that grows behind another that shrinks (the engine trims its heap,
a front end keeps its buffers), so every process is followed on its own. Roles come from
`/health` (front ends and engines by pid) and the supervisor's pid; any other process under the
supervisor is named by its command line. The resident set is split as /proc tells it: anonymous
memory (heaps, tensors), shared memory (the arenas in /dev/shm that a process has touched) and
file pages (mapped libraries and weights), so that a growth says where it is.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.lib.common import descendants

_FIELDS = {"VmRSS:": "rss", "RssAnon:": "anon", "RssShmem:": "shmem", "RssFile:": "file"}


def memory_of(pid: int) -> dict[str, int] | None:
    """A process's resident set and its parts, in bytes (Linux /proc); None once it is gone."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return None
    found = {}
    for line in lines:
        words = line.split()
        if words and words[0] in _FIELDS:
            found[_FIELDS[words[0]]] = int(words[1]) * 1024
    return found if "rss" in found else None


def role_of_command(pid: int) -> str:
    """A name for a process /health does not list, from its command line."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return f"process {pid}"
    if "resource_tracker" in command:
        return "resource tracker"
    if "spawn_main" in command:
        return f"spawned process {pid}"
    return f"process {pid}"


def roles(supervisor: int, health: dict) -> dict[int, str]:
    """pid -> role of every process of the server. With one front end, it runs in the supervisor's
    process and /health lists none."""
    front_ends = {entry["pid"]: f"front end {entry['index']}" for entry in health.get("frontends", [])}
    engines = {entry["pid"]: f"engine {entry['index']} ({entry['device']})" for entry in health.get("engines", [])}
    named = {supervisor: "supervisor" if front_ends else "supervisor + front end", **front_ends, **engines}
    return {pid: named.get(pid) or role_of_command(pid) for pid in [supervisor, *descendants(supervisor)]}


@dataclass
class Track:
    """One process's samples: (seconds since the start, memory_of)."""

    role: str
    pid: int
    samples: list[tuple[float, dict[str, int]]] = field(default_factory=list)

    def level(self, start: float, end: float, part: str = "rss") -> int | None:
        """The highest sample in [start, end): under load the resident set saw-tooths (batches fault
        pages in, trims hand them back), so a level is a high-water mark."""
        values = [sample[part] for t, sample in self.samples if start <= t < end and part in sample]
        return max(values) if values else None

    def last(self, part: str = "rss", before: float = float("inf")) -> int | None:
        values = [sample[part] for t, sample in self.samples if t < before and part in sample]
        return values[-1] if values else None


@dataclass
class MemoryWatch:
    """Samples every process in `roles` each time `sample()` is called; a process that exits is
    kept with the samples it had (and counted in `gone`)."""

    roles: dict[int, str]
    started: float = field(default_factory=time.monotonic)
    tracks: dict[int, Track] = field(default_factory=dict)
    gone: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.tracks = {pid: Track(role, pid) for pid, role in self.roles.items()}

    def sample(self) -> None:
        now = time.monotonic() - self.started
        for pid, track in self.tracks.items():
            memory = memory_of(pid)
            if memory is None:
                if track.role not in self.gone:
                    self.gone.append(track.role)
                continue
            track.samples.append((now, memory))


@dataclass(frozen=True)
class Verdict:
    """One process judged: its first sample (before the load), its level after the warm-up, its
    highest sample after that, its last sample under load and once idle, and whether the peak
    stays within the tolerance."""

    role: str
    pid: int
    start: int
    baseline: int
    peak: int
    peak_at: float
    final: int
    idle: int | None
    parts_at_peak: dict[str, int]
    parts_at_baseline: dict[str, int]
    tolerance: float

    @property
    def growth(self) -> float:
        return self.peak / self.baseline - 1

    @property
    def passed(self) -> bool:
        return self.growth <= self.tolerance


def judge(track: Track, warmup: float, window: float, load_end: float, tolerance: float) -> Verdict | None:
    """The baseline is the level in [warmup, warmup + window); the peak is the highest sample after
    it while the load ran. None for a process with no sample in the baseline's window."""
    baseline = track.level(warmup, warmup + window)
    after = [(t, s) for t, s in track.samples if warmup + window <= t < load_end]
    if baseline is None or not after:
        return None
    peak_at, at_peak = max(after, key=lambda item: item[1]["rss"])
    at_baseline = max((s for t, s in track.samples if warmup <= t < warmup + window), key=lambda s: s["rss"])
    idle = [s["rss"] for t, s in track.samples if t >= load_end]
    return Verdict(track.role, track.pid, track.samples[0][1]["rss"], baseline, at_peak["rss"], peak_at, after[-1][1]["rss"],
                   idle[-1] if idle else None, at_peak, at_baseline, tolerance)
