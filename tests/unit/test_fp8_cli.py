"""--quantization fp8 refused where it cannot run, before anything starts: on a CPU, on a GPU
without FP8 tensor cores, at a dtype other than bf16, and for a model family or kind it does not
serve; each one line naming the flag, exit status 2, as a wrong flag value is (server/cli/values.py).
--fp8-bf16-layers sets the plan's bf16 layers, and only with --quantization fp8.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest
import torch

from rose_embed.engine.contract.config import Fp8Plan
from rose_embed.server.cli.main import build_parser, config_from_args, serve
from tests.support.helpers import config_only_model
from tests.conftest import REPO

NEEDS = "argument --quantization: fp8 needs a GPU with FP8 tensor cores (compute capability 8.9 or newer: Ada, Hopper, " \
        "Blackwell)"


def _pretend_gpu(monkeypatch, capability: tuple[int, int], name: str = "NVIDIA H200") -> None:
    from rose_embed.server.processes import topology

    monkeypatch.setattr(topology, "_gpu_driver_present", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=0: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: name)


def _config(*flags: str):
    return config_from_args(build_parser().parse_args(["serve", *flags]))


@pytest.mark.slow  # a Python process with torch each
@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine where torch sees no GPU")
@pytest.mark.parametrize("command", [["serve"], ["embed", "in.jsonl", "-o", "out.npy"]])
def test_on_a_cpu_the_command_stops_with_one_line_and_status_2(command, tmp_path):
    done = subprocess.run([sys.executable, "-m", "rose_embed", *command, "--quantization", "fp8"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(REPO), "PATH": ""})
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [f"rose-embed {command[0]}: error: {NEEDS}; the engine would run on cpu"]
    assert not (tmp_path / "out.npy").exists() and not (tmp_path / "out.npy.parts").exists()


def test_named_cpu_devices_are_refused_as_well():
    with pytest.raises(ValueError) as exc:
        _config("--devices", "cpu", "--quantization", "fp8")
    assert str(exc.value) == f"{NEEDS}; the engine would run on cpu"


def test_a_gpu_older_than_ada_is_refused_by_its_capability(monkeypatch):
    _pretend_gpu(monkeypatch, (8, 0), "NVIDIA A100-SXM4-80GB")
    with pytest.raises(ValueError) as exc:
        _config("--quantization", "fp8")
    assert str(exc.value) == f"{NEEDS}; cuda:0 (NVIDIA A100-SXM4-80GB) has compute capability 8.0"


def test_a_hopper_gpu_takes_fp8_in_bf16_only(monkeypatch):
    _pretend_gpu(monkeypatch, (9, 0))
    assert _config("--quantization", "fp8").engine.quantization == "fp8"
    assert _config("--quantization", "fp8", "--dtype", "bfloat16").engine.quantization == "fp8"
    assert _config().engine.quantization is None
    with pytest.raises(ValueError) as exc:
        _config("--quantization", "fp8", "--dtype", "float32")
    assert str(exc.value) == ("argument --quantization: fp8 runs the layers around its GEMMs in bfloat16; "
                              "--dtype float32 asks for float32")


@pytest.mark.parametrize("config, refusal", [
    ({"model_type": "modernbert", "hidden_size": 64, "max_position_embeddings": 512},
     "fp8 does not support modernbert models yet (model); it supports BERT, DistilBERT, MPNet, Qwen3"),
    ({"model_type": "mistral", "hidden_size": 64, "max_position_embeddings": 512, "num_attention_heads": 4},
     "fp8 does not support mistral models yet (model); it supports BERT, DistilBERT, MPNet, Qwen3"),
    ({"model_type": "bert", "hidden_size": 32, "max_position_embeddings": 512,
      "architectures": ["BertForSequenceClassification"], "id2label": {"0": "LABEL_0"}},
     "fp8 serves embedders; model is a reranker"),
])
def test_a_model_fp8_does_not_serve_is_refused_by_name(config, refusal, monkeypatch, tmp_path, capsys):
    _pretend_gpu(monkeypatch, (9, 0))
    path = config_only_model(tmp_path / "model", config)
    with pytest.raises(SystemExit) as exc:
        serve(_config("--model", str(path), "--quantization", "fp8"))
    assert exc.value.code == 2
    assert capsys.readouterr().err.splitlines() == [f"rose-embed serve: error: argument --quantization: {refusal}"]


def test_embed_refuses_a_model_fp8_does_not_serve(monkeypatch, tmp_path, capsys):
    from rose_embed.server.cli.main import main

    _pretend_gpu(monkeypatch, (9, 0))
    path = config_only_model(tmp_path / "model", {"model_type": "modernbert", "hidden_size": 64,
                                           "max_position_embeddings": 512})
    (tmp_path / "in.jsonl").write_text('{"text": "a"}\n')
    with pytest.raises(SystemExit) as exc:
        main(["embed", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "out.npy"), "--model", str(path),
              "--devices", "cuda", "--quantization", "fp8"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "rose-embed embed: error: argument --quantization: fp8 does not support modernbert models yet (model); "
        "it supports BERT, DistilBERT, MPNet, Qwen3")
    assert not (tmp_path / "out.npy").exists()


def test_fp8_bf16_layers_sets_the_plan_and_needs_fp8(monkeypatch):
    _pretend_gpu(monkeypatch, (9, 0))
    assert _config("--quantization", "fp8").engine.fp8_plan == Fp8Plan()
    plan = _config("--quantization", "fp8", "--fp8-bf16-layers", "10").engine.fp8_plan
    assert plan == replace(Fp8Plan(), bf16_first_layers=10)
    assert _config("--quantization", "fp8", "--fp8-bf16-layers", "0").engine.fp8_plan.bf16_first_layers == 0
    with pytest.raises(ValueError) as exc:
        _config("--fp8-bf16-layers", "4")
    assert str(exc.value) == "argument --fp8-bf16-layers: applies to --quantization fp8 only"


def test_fp8_bf16_layers_takes_a_whole_number(capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["serve", "--fp8-bf16-layers", "-1"])
    assert exc.value.code == 2
    assert "argument --fp8-bf16-layers: must be 0 or more; got -1" in capsys.readouterr().err


@pytest.mark.slow  # a Python process with torch each
@pytest.mark.parametrize("flag, value", [("--fp8-bf16-layers", "4"), ("--fp8-weight-rounding", "nearest"),
                                         ("--fp8-pooled-tokens", "fp8")])
def test_embed_refuses_an_fp8_flag_without_fp8(tmp_path, flag, value):
    done = subprocess.run([sys.executable, "-m", "rose_embed", "embed", "in.jsonl", "-o", "out.npy", flag, value],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(REPO), "PATH": ""})
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [f"rose-embed embed: error: argument {flag}: applies to --quantization fp8 only"]
    assert not (tmp_path / "out.npy").exists()


def test_fp8_weight_rounding_sets_the_plan_and_needs_fp8(monkeypatch, capsys):
    _pretend_gpu(monkeypatch, (9, 0))
    assert _config("--quantization", "fp8").engine.fp8_plan.weight_rounding == "gptq"
    plan = _config("--quantization", "fp8", "--fp8-weight-rounding", "nearest", "--fp8-bf16-layers", "2").engine.fp8_plan
    assert plan == replace(Fp8Plan(), weight_rounding="nearest", bf16_first_layers=2)
    with pytest.raises(ValueError) as exc:
        _config("--fp8-weight-rounding", "nearest")
    assert str(exc.value) == "argument --fp8-weight-rounding: applies to --quantization fp8 only"
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["serve", "--fp8-weight-rounding", "stochastic"])
    assert exit_.value.code == 2
    assert "argument --fp8-weight-rounding: invalid choice: 'stochastic'" in capsys.readouterr().err


def test_fp8_pooled_tokens_sets_the_plan_and_needs_fp8(monkeypatch, capsys):
    _pretend_gpu(monkeypatch, (9, 0))
    assert _config("--quantization", "fp8").engine.fp8_plan.bf16_pooled_tokens is None  # by the model's width
    assert _config("--quantization", "fp8", "--fp8-pooled-tokens", "fp8").engine.fp8_plan.bf16_pooled_tokens is False
    assert _config("--quantization", "fp8", "--fp8-pooled-tokens", "bf16").engine.fp8_plan.bf16_pooled_tokens is True
    with pytest.raises(ValueError) as exc:
        _config("--fp8-pooled-tokens", "bf16")
    assert str(exc.value) == "argument --fp8-pooled-tokens: applies to --quantization fp8 only"
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["serve", "--fp8-pooled-tokens", "fp16"])
    assert exit_.value.code == 2
    assert "argument --fp8-pooled-tokens: invalid choice: 'fp16'" in capsys.readouterr().err


def test_embed_hands_the_fp8_flags_to_the_engine(monkeypatch, tmp_path):
    from rose_embed.corpus import engine_setup
    from rose_embed.server.cli.main import main

    _pretend_gpu(monkeypatch, (9, 0))
    path = config_only_model(tmp_path / "model", {"model_type": "bert", "hidden_size": 64,
                                                  "max_position_embeddings": 512})
    (tmp_path / "in.jsonl").write_text('{"text": "a"}\n')
    built = {}

    def build_engine(**options):  # stops the job where the weights would load
        built.update(options)
        raise ValueError("stopped before loading")

    monkeypatch.setattr(engine_setup, "build_engine", build_engine)
    with pytest.raises(SystemExit):
        main(["embed", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "out.npy"), "--model", str(path),
              "--devices", "cuda", "--quantization", "fp8", "--fp8-weight-rounding", "nearest",
              "--fp8-bf16-layers", "2", "--fp8-pooled-tokens", "fp8"])
    assert built["fp8_plan"] == replace(Fp8Plan(), weight_rounding="nearest", bf16_first_layers=2,
                                        bf16_pooled_tokens=False)
    assert not (tmp_path / "out.npy").exists()
