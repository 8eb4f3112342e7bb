"""The server's shape from the machine and the flags (server/processes/topology.py, through the CLI): one
engine process per device, K front ends, the batches each keeps on each engine."""

from __future__ import annotations

import pytest
import torch

from rose_embed.server.processes import topology
from rose_embed.server.cli.main import build_parser, config_from_args
from rose_embed.server.processes.topology import default_front_ends, default_part_processes


def config(*flags: str):
    return config_from_args(build_parser().parse_args(["serve", *flags]))


@pytest.fixture
def two_gpus(monkeypatch):
    """What the CLI makes of a machine where torch sees cuda:0 and cuda:1, on any machine."""
    monkeypatch.setattr(topology, "_gpu_driver_present", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


def test_a_machine_without_gpus_serves_one_cpu_engine_and_one_front_end(no_gpu):
    cfg = config()
    assert cfg.devices == ("cpu",) and cfg.frontend_workers == 1 and cfg.part_processes == 0
    assert cfg.engine.device == "cpu"


def test_every_visible_gpu_gets_an_engine_and_front_ends_follow_the_cores(two_gpus, monkeypatch):
    monkeypatch.setattr("rose_embed.server.processes.topology.available_cores", lambda: 16)
    cfg = config()
    assert cfg.devices == ("cuda:0", "cuda:1")
    assert cfg.frontend_workers == 14 and cfg.part_processes == 8
    assert config("--part-processes", "0").part_processes == 0
    assert config("--devices", "cuda:1").devices == ("cuda:1",)
    assert config("--devices", "cuda").devices == ("cuda:0",)
    assert config("--frontend-workers", "1").frontend_workers == 1


def test_default_front_ends():
    assert default_front_ends(("cpu",), cores=64) == 1
    assert default_front_ends(("cuda:0",), cores=2) == 1
    assert default_front_ends(("cuda:0",), cores=16) == 14
    assert default_front_ends(("cuda:0",), cores=6) == 4
    assert default_front_ends(("cuda:0",), cores=64) == 14  # at most 14 per GPU
    assert default_front_ends(("cuda:0", "cuda:1"), cores=64) == 28


def test_default_part_processes():
    assert default_part_processes(("cpu",), cores=64) == 0  # the engine is a CPU server's bottleneck
    assert default_part_processes(("cuda:0",), cores=2) == 1
    assert default_part_processes(("cuda:0",), cores=16) == 8
    assert default_part_processes(("cuda:0",), cores=64) == 8
