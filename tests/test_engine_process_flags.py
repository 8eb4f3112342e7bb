"""The server's shape from the machine and the flags (server/topology.py, through the CLI): one
engine process per device, K front ends, the batches each keeps on each engine."""

from __future__ import annotations

import pytest
import torch

from server import topology
from server.__main__ import build_parser, config_from_args
from server.topology import batches_in_flight, default_front_ends, parse_devices


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
    assert cfg.devices == ("cpu",) and cfg.frontend_workers == 1 and cfg.batches_in_flight == 1
    assert cfg.engine.device == "cpu"


def test_every_visible_gpu_gets_an_engine_and_front_ends_follow_the_cores(two_gpus, monkeypatch):
    monkeypatch.setattr("server.topology.available_cores", lambda: 16)
    cfg = config()
    assert cfg.devices == ("cuda:0", "cuda:1")
    assert cfg.frontend_workers == 8 and cfg.batches_in_flight == 1
    assert config("--devices", "cuda:1").devices == ("cuda:1",)
    assert config("--devices", "cuda").devices == ("cuda:0",)
    assert config("--frontend-workers", "1").batches_in_flight == 2  # a GPU fed by one front end


def test_default_front_ends():
    assert default_front_ends(("cpu",), cores=64) == 1
    assert default_front_ends(("cuda:0",), cores=2) == 1
    assert default_front_ends(("cuda:0",), cores=16) == 8
    assert default_front_ends(("cuda:0",), cores=6) == 3
    assert default_front_ends(("cuda:0",), cores=64) == 8  # at most 8 per GPU
    assert default_front_ends(("cuda:0", "cuda:1"), cores=64) == 16


def test_batches_in_flight():
    assert batches_in_flight(("cuda:0",), 1) == 2
    assert batches_in_flight(("cuda:0",), 4) == 1
    assert batches_in_flight(("cpu",), 1) == 1
    assert batches_in_flight(("cpu", "cpu"), 1) == 1


def test_several_cpu_engines_share_the_cores(no_gpu, monkeypatch):
    from server.topology import engine_config_for

    monkeypatch.setattr("server.topology.available_cores", lambda: 8)
    cfg = config("--devices", "cpu,cpu")
    assert cfg.devices == ("cpu", "cpu") == parse_devices("cpu, cpu")
    assert engine_config_for(cfg.engine, cfg.devices, "cpu").num_threads == 4
    assert engine_config_for(config("--devices", "cpu,cpu", "--num-threads", "3").engine, cfg.devices,
                             "cpu").num_threads == 3
