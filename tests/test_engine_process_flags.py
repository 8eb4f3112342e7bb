"""--engine-process and --max-batches-in-flight: what the CLI turns them into (server/__main__.py)."""

from __future__ import annotations

import pytest
import torch

from server.__main__ import build_parser, config_from_args


def config(*flags: str):
    return config_from_args(build_parser().parse_args(["serve", *flags]))


@pytest.fixture
def two_gpus(monkeypatch):
    """What the CLI turns CUDA flags into, on any machine: torch is made to see cuda:0 and cuda:1."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)


@pytest.mark.skipif(torch.cuda.is_available(), reason="auto means the CPU only where no GPU is visible")
def test_auto_runs_a_cpu_engine_in_a_process_of_its_own():
    assert config().engine_devices == ("cpu",)
    assert config().engine.device == "cpu"
    assert config("--device", "cpu").engine_devices == ("cpu",)


def test_off_keeps_the_engine_in_the_server_process_and_cuda_defaults_to_it(two_gpus):
    assert config("--engine-process", "off").engine_devices == ()
    assert config("--device", "cpu", "--engine-process", "off").engine.device == "cpu"
    assert config("--device", "cuda").engine_devices == ()
    assert config("--device", "cuda:1").engine.device == "cuda:1"
    assert config("--device", "cuda", "--engine-process", "on").engine_devices == ("cuda",)


def test_several_engines_always_run_in_processes():
    assert config("--device", "cpu", "--data-parallel", "2").engine_devices == ("cpu", "cpu")
    with pytest.raises(ValueError, match="--engine-process off"):
        config("--device", "cpu", "--data-parallel", "2", "--engine-process", "off")


def test_batches_in_flight_default_to_two_only_on_a_gpu_with_one_front_end(two_gpus):
    assert config("--device", "cuda").batches_in_flight == 2
    assert config("--device", "cuda", "--frontend-workers", "4").batches_in_flight == 1
    assert config("--device", "cpu").batches_in_flight == 1
    assert config("--device", "cpu", "--engine-process", "off").batches_in_flight == 1
    assert config("--device", "cuda", "--frontend-workers", "4", "--max-batches-in-flight", "2").batches_in_flight == 2
    with pytest.raises(SystemExit):  # argparse's one line and status 2 (tests/test_cli_flags.py)
        config("--max-batches-in-flight", "0")
