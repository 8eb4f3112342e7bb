"""Data parallel on one host (`--data-parallel N`, `--devices`): one engine process per device.

The front end keeps what requests need before the model (the model's description and its
tokenizer) and the one batcher; every device gets a whole copy of the model in its own
process (engine/engine_process.py). The batcher sends each batch to the least-loaded
engine. No collective communication is involved (no NCCL, no torch.distributed): engines
never talk to each other, only to the front end, through shared memory and a pipe.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import torch

from engine.config import EngineConfig
from engine.engine import resolve_dtype, tokenizer_for, vocab_size_of
from engine.engine_process import EngineProcess
from engine.loader import ModelSpec, load_spec
from engine.shm_slots import SlotLayout


def resolve_engine_devices(device: str, data_parallel: int = 1, devices: str | None = None) -> tuple[str, ...]:
    """The device of each engine: `devices` ("cuda:0,cuda:1") if given, else `data_parallel`
    engines of `device` (cpu: N processes; auto or cuda: cuda:0 .. cuda:N-1)."""
    if data_parallel < 1:
        raise ValueError(f"--data-parallel must be at least 1; got {data_parallel}")
    if devices:
        names = tuple(name.strip() for name in devices.split(",") if name.strip())
        if data_parallel not in (1, len(names)):
            raise ValueError(f"--data-parallel {data_parallel} does not match the {len(names)} --devices")
        for name in names:
            if not (name == "cpu" or name == "cuda" or name.startswith("cuda:")):
                raise ValueError(f"--devices takes cpu, cuda or cuda:N names; got {name!r}")
        return names
    if data_parallel == 1:
        return (device,)
    kind = resolve_device(device)
    if kind == "cpu":
        return ("cpu",) * data_parallel
    if kind == "cuda":
        return tuple(f"cuda:{i}" for i in range(data_parallel))
    raise ValueError(f"--data-parallel {data_parallel} runs one engine per GPU from cuda:0; "
                     f"to place them yourself, name them with --devices instead of --device {device}")


def resolve_device(device: str) -> str:
    """"auto" -> "cuda" where a GPU is visible, else "cpu"; any other name as it is."""
    if device != "auto":
        return device
    return "cuda" if torch.cuda.is_available() else "cpu"


def engine_process_wanted(choice: str, device: str) -> bool:
    """--engine-process for a single engine: "on", "off", or "auto": on for the CPU only.

    On the CPU, the engine's torch threads and the server's event loop and tokenizer threads
    slow each other down inside one process: the HTTP path reached 0.80x the engine alone,
    against 0.92x with the engine in a process of its own (bench/results/cpu.md). On CUDA
    the engine thread mostly waits for the GPU, and the in-process path has no copy through
    shared memory.
    """
    return choice == "on" or (choice == "auto" and resolve_device(device) == "cpu")


def check_devices(devices: tuple[str, ...]) -> None:
    """Fail before loading anything when a named GPU does not exist (the message names the ones that do)."""
    wanted = [int(d.split(":", 1)[1]) if ":" in d else 0 for d in devices if d.startswith("cuda")]
    if not wanted:
        return
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    missing = sorted({i for i in wanted if i >= count})
    if missing:
        seen = "no CUDA device (use cpu)" if count == 0 else (
            f"{count} CUDA device{'s' if count > 1 else ''}: {', '.join(f'cuda:{i}' for i in range(count))}")
        raise ValueError(f"{', '.join(f'cuda:{i}' for i in missing)} not found; torch sees {seen}")


def engine_config_for(config: EngineConfig, devices: tuple[str, ...], device: str) -> EngineConfig:
    """One engine's configuration among `devices`: its device, and on CPU its share of the cores."""
    if device != "cpu" or config.num_threads:
        return replace(config, device=device)
    num_cpu_engines = sum(d == "cpu" for d in devices)
    # Engines that each took every core would fight over them; a share each scales instead.
    return replace(config, device=device, num_threads=max(1, len(os.sched_getaffinity(0)) // num_cpu_engines))


class EngineGroup:
    """Several engines behind one front end; the batcher reads `replicas`.

    It answers what routes ask of an Engine (spec, tokenizer, vocab_size) without loading
    the model here; `start` launches the engine processes and returns once all are warm.
    """

    def __init__(self, config: EngineConfig, devices: tuple[str, ...], plugin: Callable | None = None,
                 max_batches_in_flight: int = 2):
        if len(devices) < 1:
            raise ValueError("an engine group needs at least one device")
        self.config, self.devices, self._plugin = config, devices, plugin
        self.max_batches_in_flight = max_batches_in_flight
        self.spec: ModelSpec = load_spec(config.model, config.max_seq_len, config.model_overrides, config.revision)
        self.tokenizer = tokenizer_for(self.spec)
        self.dtype = resolve_dtype(config.dtype, torch.device(devices[0].split(":")[0]))
        self.replicas: list[EngineProcess] = []

    @property
    def device(self) -> str:
        return ", ".join(self.devices)

    @property
    def dimensions(self) -> int:
        return self.spec.embedding_dim

    @property
    def vocab_size(self) -> int:
        return vocab_size_of(self.tokenizer, self.spec)

    def tokenize(self, texts: list[str]) -> list[np.ndarray]:
        return self.tokenizer.encode(texts)

    def engine_config(self, device: str) -> EngineConfig:
        return engine_config_for(self.config, self.devices, device)

    def start(self, ready_timeout: float = 900.0) -> None:
        """Start every engine process at once (they load in parallel); return when all are warm."""
        layout = SlotLayout(self.max_batches_in_flight, self.config.max_batch_tokens, self.config.max_batch_seqs,
                            self.spec.embedding_dim)
        try:
            for index, device in enumerate(self.devices):
                self.replicas.append(EngineProcess(index, self.engine_config(device), layout, self._plugin))
            for replica in self.replicas:
                replica.wait_ready(ready_timeout)
        except BaseException:
            self.shutdown()
            raise

    def stop_serving(self) -> None:
        """On the event loop the batcher ran on: every engine leaves the rotation and is asked to exit."""
        for replica in self.replicas:
            replica.stop_serving()

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop every engine (blocking; after `stop_serving` where a batcher used them)."""
        for replica in self.replicas:
            replica.ask_to_stop()  # all at once, so that they wind down together
        for replica in self.replicas:
            replica.shutdown(timeout)

    @property
    def num_graph_replays(self) -> int:
        return sum(r.num_graph_replays for r in self.replicas)

    @property
    def num_eager_runs(self) -> int:
        return sum(r.num_eager_runs for r in self.replicas)

    @property
    def num_capture_failures(self) -> int:
        return sum(r.num_capture_failures for r in self.replicas)
