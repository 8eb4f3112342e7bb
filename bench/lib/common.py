"""Helpers shared by the benchmarks: the workload, a check of vectors against the engine's, a server
process, the machine's description, a CUDA timer. Measures nothing itself."""

from __future__ import annotations

import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
DEFAULT_DATA = REPO / "tests" / "data" / "stdlib_docstrings.jsonl"


def load_texts(n: int, path: Path = DEFAULT_DATA) -> list[str]:
    texts = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            texts.append(json.loads(line)["text"])
            if len(texts) == n:
                break
    return texts


def build_texts(path: Path, num_texts: int, join: int) -> list[str]:
    """num_texts texts of `join` consecutive paragraphs each (4: document-sized texts)."""
    paragraphs = load_texts(num_texts * join, path)
    return ["\n\n".join(paragraphs[i : i + join]) for i in range(0, len(paragraphs), join)][:num_texts]


def cosine_rows(a, b):
    import numpy as np

    return (a * b).sum(1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-30)


class VectorCheck:
    """Counts received vectors whose cosine to the engine's reference is below the bar."""

    def __init__(self, min_cosine: float):
        self.min_cosine, self.checked, self.mismatches, self.worst = min_cosine, 0, 0, 1.0

    def add(self, got, want) -> None:
        import numpy as np

        if len(got) == 0:
            return
        cos = cosine_rows(got.astype(np.float32), want)
        self.checked += len(cos)
        self.mismatches += int((cos < self.min_cosine).sum())
        self.worst = min(self.worst, float(cos.min()))


def cuda_event_ms(fn, repeats: int, warmups: int = 3) -> float:
    """Median milliseconds of fn() on the current CUDA stream, timed by CUDA events around each
    call, after `warmups` untimed calls."""
    import torch

    for _ in range(warmups):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def capture_graph(fn, warmups: int = 1):
    """A CUDA graph of fn(), captured after `warmups` calls on a side stream, so that kernels
    compile, memory is allocated and cuBLAS picks its algorithms outside the capture."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmups):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


# How many calls of a step one graph holds in graph_seconds: enough that a replay's launch is noise.
CALLS_PER_GRAPH = 20


def graph_seconds(fn, repeats: int = 5) -> float:
    """Seconds per call of fn, from a CUDA graph of CALLS_PER_GRAPH calls (the median of `repeats` replays)."""
    import torch

    graph = capture_graph(lambda: [fn() for _ in range(CALLS_PER_GRAPH)], warmups=2)
    times = []
    for _ in range(repeats + 1):
        torch.cuda.synchronize()
        start = time.perf_counter()
        graph.replay()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    del graph
    return sorted(times[1:])[repeats // 2] / CALLS_PER_GRAPH


def publish(report: str, out: Path | None) -> None:
    """Print a benchmark's markdown report and, when asked, write it where results are kept."""
    print(report)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(report)


def gpu_run_lines(extra: str = "") -> list[str]:
    """A GPU benchmark report's first lines: the command that ran, then the GPU, torch (and
    `extra`, as "; triton X") and the date."""
    import torch

    return [f"- command: `python3 {' '.join(sys.argv)}`",
            f"- GPU: {torch.cuda.get_device_name()}; torch {torch.__version__}{extra}; "
            f"date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"]


def machine_description() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import torch

    return f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}, torch {torch.__version__}"


def hardware(device) -> str:
    """The machine, and the GPU's name where the benchmark ran on one."""
    text = machine_description()
    if str(device).startswith("cuda"):
        import torch

        text += f"; {torch.cuda.get_device_name()}"
    return text


def descendants(pid: int) -> list[int]:
    """Every process under `pid` (Linux /proc): front ends and engine processes of a server."""
    try:
        children = [int(c) for t in Path(f"/proc/{pid}/task").iterdir()
                    for c in (t / "children").read_text().split()]
    except OSError:
        return []
    return [d for child in children for d in (child, *descendants(child))]


def own_cpu_seconds(pid: int) -> float:
    """User + system CPU time so far of one process, all its threads (Linux /proc); 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:  # it exited meanwhile
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time so far of a process and its live descendants (the engines, and
    front ends beyond the first, are child processes of the server), all threads (Linux /proc)."""
    return sum(own_cpu_seconds(one) for one in [pid, *descendants(pid)])


def machine_busy_seconds() -> float:
    """CPU seconds the machine spent on anything but idling and waiting for I/O (/proc/stat:
    user, nice, system and steal; interrupts left out, as no process is charged for them)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, steal = (int(fields[i]) for i in (0, 1, 2, 7))
    return (user + nice + system + steal) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_healthy(url: str, proc: subprocess.Popen, timeout: float = 300.0) -> None:
    """Poll GET /health until 200; raise if the process exits or the time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    raise RuntimeError("server did not become ready")


class ServerProcess:
    """`python -m rose_embed serve` on loopback; `url` is ready once started."""

    def __init__(self, *args: str, timeout: float = 300.0, log_path: Path | None = None):
        """`log_path`: the server's log at level info goes there (else warnings only, to this stderr)."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # The repository first, then whatever PYTHONPATH already holds (packages installed
        # with --target on a machine without a virtual environment).
        path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
        env = dict(os.environ, PYTHONPATH=path, PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1")
        # Without a log file stderr is inherited: at --log-level warning it stays quiet unless the server fails.
        self.log_path = log_path
        level = "info" if log_path is not None else "warning"
        self._log = open(log_path, "w") if log_path is not None else None  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rose_embed", "serve", "--port", str(self.port), "--log-level", level, *args],
            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=self._log,
        )
        try:
            wait_until_healthy(self.url, self.proc, timeout)
        except RuntimeError:
            self.stop()
            raise

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        if self._log is not None:
            self._log.close()
