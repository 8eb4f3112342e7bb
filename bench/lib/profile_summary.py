"""py-spy on the server while it serves, and a summary of its collapsed stacks.

    python bench/lib/profile_summary.py PROFILE.txt [--top 15]

py-spy's `raw` format is one line per distinct stack, `frame;frame;...;leaf COUNT`, with the
thread name first when --threads is given. The summary gives, per thread, its share of the
samples, and the functions with the largest self (leaf) and inclusive shares: enough to say
where the time of the front end goes without opening a flame graph.
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import signal
import subprocess
from pathlib import Path


class PySpy:
    """`py-spy record` attached to a running process for the life of a `with` block."""

    def __init__(self, pid: int, out: Path, rate: int = 200):
        self.pid, self.out, self.rate = pid, out, rate
        self._proc: subprocess.Popen | None = None

    def __enter__(self) -> PySpy:
        exe = shutil.which("py-spy")
        if exe is None:
            raise RuntimeError("py-spy is not installed (pip install py-spy)")
        # --threads: the thread name leads each stack, so event loop, tokenizer and engine
        # threads can be told apart; --gil would hide the threads that wait in native code.
        # --subprocesses: front-end workers and engine processes too (the process leads then).
        self._proc = subprocess.Popen(
            [exe, "record", "--pid", str(self.pid), "--output", str(self.out), "--format", "raw",
             "--rate", str(self.rate), "--threads", "--subprocesses", "--nonblocking"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        return self

    def __exit__(self, *exc) -> None:
        self._proc.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        try:
            self._proc.wait(60)
        except subprocess.TimeoutExpired:
            self._proc.kill()


_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")


def _short(frame: str) -> str:
    """`func (path/to/file.py:12)` -> `func (file.py)`: lines differ, the function is what counts."""
    m = _FRAME.match(frame.strip())
    if not m:
        return frame.strip()
    return f"{m['func']} ({Path(m['file']).name})"


_PROCESS_FRAMES = re.compile(r'(?:process \d+:"[^"]*";)*')
_PID = re.compile(r"process (\d+):")


def summarize(path: Path, top: int = 15) -> list[str]:
    """Markdown lines: samples per process and per thread, then top functions by self and
    inclusive share. With several processes, a process's share of the samples over the
    recording's length says how busy it was (samples are taken of running threads only)."""
    processes: collections.Counter[str] = collections.Counter()
    threads: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        # With --subprocesses, a stack is led by its process's and its ancestors' frames,
        # `process PID:"command line"`, whose command line may hold a ';'.
        pids = _PROCESS_FRAMES.match(stack)[0]
        process = f"process {_PID.findall(pids)[-1]}" if pids else ""
        frames = stack[len(pids):].split(";")
        thread = frames[0] if frames[0].startswith("thread") else "?"
        names = [_short(f) for f in frames if not f.startswith("thread")]
        total += n
        processes[process] += n
        threads[f"{process} {thread}".strip()] += n
        if names:
            own[names[-1]] += n
        for name in set(names):
            inclusive[name] += n
    if total == 0:
        return ["(no samples)"]
    lines = [f"{total} samples", ""]
    if len(processes) > 1:
        lines += ["| process | share |", "| --- | ---: |"]
        lines += [f"| {p} | {100 * n / total:.1f}% |" for p, n in processes.most_common(12)] + [""]
    lines += ["| thread | share |", "| --- | ---: |"]
    lines += [f"| {t} | {100 * n / total:.1f}% |" for t, n in threads.most_common(12)]
    lines += ["", "| function (self) | share |", "| --- | ---: |"]
    lines += [f"| {f} | {100 * n / total:.1f}% |" for f, n in own.most_common(top)]
    lines += ["", "| function (inclusive) | share |", "| --- | ---: |"]
    lines += [f"| {f} | {100 * n / total:.1f}% |" for f, n in inclusive.most_common(top)]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("profile", type=Path)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    print("\n".join(summarize(args.profile, args.top)))


if __name__ == "__main__":
    main()
