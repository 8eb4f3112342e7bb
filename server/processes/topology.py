"""The one place that decides the server's shape from the machine: which devices get an engine,
how many front ends feed them, how many batches each front end keeps on each engine, and how
many CPU threads a CPU engine uses. Flags may name the devices and the front ends; the rest
follows.

Why the rules are what they are (the measurements: docs/topology.md, bench/results/):
- one Python event loop tokenizes and answers far fewer short texts a second than a GPU
  embeds, so on a GPU the front ends, not the device, set the speed of small models: every
  core but two (the engine's own threads, whatever else the host runs) gets a front end, up
  to a cap per GPU past which more did not pay;
- a large request is one front end's: its parts' tokenizing and encoding go to part
  processes shared by all the front ends (server/processes/part_processes.py), half the cores' worth
  up to a cap. They idle under many small requests, which never use them;
- on the CPU the engine is the bottleneck, and one front end already reaches the engine's own
  speed, so a CPU server runs one front end and no part processes;
- a GPU fed by one front end keeps two of its batches in flight (one computing, one ready
  behind it); with several front ends, or on a CPU (which computes one batch at a time),
  one each, so that the next batch is cut from a longer queue and runs larger.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from rose_embed.engine.contract.config import EngineConfig
from rose_embed.engine.contract.cpu_quota import available_cores

CORES_LEFT_TO_OTHERS = 2  # the engines' threads and whatever else the host runs
MAX_FRONT_ENDS_PER_GPU = 14
MAX_PART_PROCESSES = 8


def visible_gpus() -> int:
    if not _gpu_driver_present():  # torch would find none either, after seconds spent importing it
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _gpu_driver_present() -> bool:
    """An NVIDIA driver (or ROCm's, which torch.cuda also serves) shows in /proc or /dev."""
    dev = Path("/dev")
    return Path("/proc/driver/nvidia").exists() or (dev / "kfd").exists() or any(dev.glob("nvidia[0-9]*"))


def default_devices() -> tuple[str, ...]:
    """Every visible GPU, else the CPU."""
    count = visible_gpus()
    return tuple(f"cuda:{i}" for i in range(count)) if count else ("cpu",)


def parse_devices(text: str | None) -> tuple[str, ...]:
    """--devices "cuda:0,cuda:1" (a bare "cuda" is cuda:0); None: `default_devices()`."""
    if not text:
        return default_devices()
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    return tuple("cuda:0" if name == "cuda" else name for name in names)


def check_devices(devices: tuple[str, ...]) -> None:
    """Fail before loading anything when a named GPU is not visible (the message names the ones
    that are), or one is named twice."""
    gpus = ["cuda:0" if d == "cuda" else d for d in devices if d.startswith("cuda")]
    if len(set(gpus)) < len(gpus):
        raise ValueError(f"each GPU takes one engine; {', '.join(gpus)} names one twice")
    if not gpus:
        return
    count = visible_gpus()
    missing = sorted({i for i in (int(d.split(":", 1)[1]) for d in gpus) if i >= count})
    if missing:
        seen = "no CUDA device (use cpu)" if count == 0 else (
            f"{count} CUDA device{'s' if count > 1 else ''}: {', '.join(f'cuda:{i}' for i in range(count))}")
        raise ValueError(f"{', '.join(f'cuda:{i}' for i in missing)} not found; torch sees {seen}")


def default_front_ends(devices: tuple[str, ...], cores: int | None = None) -> int:
    """On a GPU server a front end per core beyond CORES_LEFT_TO_OTHERS (at most
    MAX_FRONT_ENDS_PER_GPU per GPU); one on a CPU server."""
    num_gpus = sum(d.startswith("cuda") for d in devices)
    if not num_gpus:
        return 1
    cores = cores or available_cores()
    return max(1, min(cores - CORES_LEFT_TO_OTHERS, MAX_FRONT_ENDS_PER_GPU * num_gpus))


def default_part_processes(devices: tuple[str, ...], cores: int | None = None) -> int:
    """On a GPU server half the cores, at most MAX_PART_PROCESSES; none on a CPU server."""
    if not any(d.startswith("cuda") for d in devices):
        return 0
    cores = cores or available_cores()
    return max(1, min(cores // 2, MAX_PART_PROCESSES))


def engine_config_for(config: EngineConfig, devices: tuple[str, ...], device: str) -> EngineConfig:
    """One engine's configuration among `devices`: its device, and on the CPU its share of the cores."""
    if device != "cpu" or config.num_threads:
        return replace(config, device=device)
    num_cpu_engines = sum(d == "cpu" for d in devices)
    # Engines that each took every core would fight over them; a share each scales instead.
    return replace(config, device=device, num_threads=max(1, available_cores() // num_cpu_engines))
