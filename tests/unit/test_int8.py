"""--quantization int8's parts on the CPU, without a real model: the int8 linear layer against its
definition, that it runs on oneDNN's VNNI / AMX kernel and never on its reference kernel, and the
refusals (a GPU, a CPU without int8 dot products, float16, a reranker, an unknown family), each
one line naming the flag, exit status 2, before anything starts (docs/cpu-int8.md)."""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn

from rose_embed.engine.rose import cpu_features
from rose_embed.engine.rose.quantization import int8_support
from rose_embed.engine.rose.quantization.int8 import Int8Linear, smoothing_factors
from rose_embed.server.cli.main import build_parser, config_from_args, serve
from tests.support.helpers import config_only_model

needs_vnni = pytest.mark.skipif(cpu_features.int8_dot_products() is None,
                                reason="needs a CPU with AVX512-VNNI or AMX-INT8")


def _definition(linear: nn.Linear, x: torch.Tensor, smoothing: torch.Tensor | None) -> torch.Tensor:
    """The scheme written out: x / s quantized per token (round half to even, +-127), the weight
    times s per output channel, the integer products summed exactly in float64, both scales and the
    bias applied after."""
    s = torch.ones(x.shape[1]) if smoothing is None else smoothing
    xs = x.float() * (1 / s)
    x_scale = xs.abs().amax(1, keepdim=True).clamp(min=1e-12) / 127
    xq = torch.round(xs / x_scale).clamp(-127, 127)
    w = linear.weight.detach().float() * s
    w_scale = w.abs().amax(1).clamp(min=1e-12) / 127
    wq = torch.round(w / w_scale[:, None]).clamp(-127, 127)
    out = (xq.double() @ wq.double().t()) * x_scale.double() * w_scale.double()
    return (out + linear.bias.double()).float()


@needs_vnni
@pytest.mark.parametrize("smoothed", [False, True])
def test_the_int8_linear_computes_its_definition(smoothed):
    torch.manual_seed(0)
    linear = nn.Linear(96, 160)
    x = torch.randn(37, 96) * torch.linspace(0.1, 8, 96)  # channels of unequal range, as a norm's output
    smoothing = smoothing_factors(x.abs().amax(0), linear.weight, 0.5) if smoothed else None
    got = Int8Linear(linear, smoothing)(x)
    want = _definition(linear, x, smoothing)
    assert got.dtype == torch.float32 and got.shape == (37, 160)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # ...and the scheme stays near the float linear: per-token int8 keeps each row's direction.
    cosine = nn.functional.cosine_similarity(got, linear(x), dim=1)
    assert cosine.min() > 0.999


@needs_vnni
def test_smoothing_evens_out_an_outlier_channel():
    """SmoothQuant's reason to be: one channel 100x the others sets every token's scale and leaves
    the others a few levels; divided out, the product is closer to the float one."""
    torch.manual_seed(1)
    linear = nn.Linear(64, 64)
    x = torch.randn(256, 64)
    x[:, 5] *= 100
    plain = Int8Linear(linear)(x)
    smoothed = Int8Linear(linear, smoothing_factors(x.abs().amax(0), linear.weight, 0.5))(x)
    exact = linear(x)
    assert (smoothed - exact).norm() < 0.5 * (plain - exact).norm()


@needs_vnni
def test_the_int8_linear_runs_on_the_vnni_kernel_not_the_reference_one(capfd):
    """oneDNN takes int8 activations to its reference kernel on a CPU without AMX, thousands of
    times slower (bench/results/cpu/README.md); uint8 ones go to its brgemm VNNI / AMX kernel."""
    torch.manual_seed(0)
    layer = Int8Linear(nn.Linear(384, 1536).to(torch.bfloat16))
    x = torch.randn(2048, 384, dtype=torch.bfloat16)
    layer(x)
    capfd.readouterr()
    with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):
        started = time.perf_counter()
        out = layer(x)
        seconds = time.perf_counter() - started
    printed = capfd.readouterr().out
    assert out.dtype == torch.bfloat16
    # onednn_verbose,v1,primitive,exec,cpu,matmul,<implementation>,...
    kernels = [line.split(",")[6] for line in printed.splitlines() if ",exec,cpu,matmul," in line]
    assert kernels, printed
    assert not any(kernel.startswith("ref") for kernel in kernels), kernels
    # A bound the reference kernel (seconds for this shape) cannot meet, with room for a busy machine.
    assert seconds < 1.0


def _config(*flags: str):
    return config_from_args(build_parser().parse_args(["serve", *flags]))


def test_a_cpu_with_int8_dot_products_takes_int8_beside_bf16_and_float32(monkeypatch):
    monkeypatch.setattr(cpu_features, "int8_dot_products", lambda: "AVX512-VNNI")
    for dtype in ("auto", "bfloat16", "float32"):
        assert _config("--devices", "cpu", "--quantization", "int8", "--dtype", dtype).engine.quantization == "int8"
    with pytest.raises(ValueError) as exc:
        _config("--devices", "cpu", "--quantization", "int8", "--dtype", "float16")
    assert str(exc.value) == ("argument --quantization: int8 runs the layers around its GEMMs in bfloat16 or "
                              "float32; --dtype float16 asks for float16")


def test_a_cpu_without_int8_dot_products_is_refused_by_name(monkeypatch):
    """Read from the CPU (an AVX2 x86 or an Arm CPU here): int8 was measured on neither."""
    monkeypatch.setattr(cpu_features, "int8_dot_products", lambda: None)
    monkeypatch.setattr("platform.machine", lambda: "aarch64")
    with pytest.raises(ValueError) as exc:
        _config("--devices", "cpu", "--quantization", "int8")
    assert str(exc.value) == ("argument --quantization: int8 runs on a CPU with AVX512-VNNI or AMX-INT8; this CPU "
                              "(aarch64) has neither, and int8 was not measured without them")


def test_int8_features_are_read_from_the_cpu_flags(monkeypatch):
    for flags, feature in ((set(), None), ({"avx2", "avx_vnni"}, None), ({"avx512f", "avx512_vnni"}, "AVX512-VNNI"),
                           ({"avx512_vnni", "amx_int8", "amx_tile"}, "AMX-INT8")):
        monkeypatch.setattr(cpu_features, "_cpuinfo_words", lambda field, flags=flags: flags)
        cpu_features.int8_dot_products.cache_clear()
        assert cpu_features.int8_dot_products() == feature
    cpu_features.int8_dot_products.cache_clear()


def test_a_gpu_is_refused_for_int8():
    assert int8_support.device_refusal("cuda:0") == ("int8 runs on a CPU with AVX512-VNNI or AMX-INT8 (the GPU's "
                                                     "quantization is fp8); the engine would run on cuda:0")


@pytest.mark.parametrize("config, refusal", [
    ({"model_type": "bert", "hidden_size": 32, "max_position_embeddings": 512,
      "architectures": ["BertForSequenceClassification"], "id2label": {"0": "LABEL_0"}},
     "int8 serves embedders; model is a reranker"),
    ({"model_type": "bert", "hidden_size": 32, "max_position_embeddings": 512,
      "architectures": ["BertForSequenceClassification"], "id2label": {"0": "no", "1": "yes"}},
     "int8 serves embedders; model is a classifier"),
])
def test_a_model_int8_does_not_serve_is_refused_by_name(config, refusal, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(cpu_features, "int8_dot_products", lambda: "AVX512-VNNI")
    path = config_only_model(tmp_path / "model", config)
    with pytest.raises(SystemExit) as exc:
        serve(_config("--model", str(path), "--devices", "cpu", "--quantization", "int8"))
    assert exc.value.code == 2
    assert capsys.readouterr().err.splitlines() == [f"rose-embed serve: error: argument --quantization: {refusal}"]


def test_an_unknown_family_is_refused_by_name():
    assert int8_support.model_refusal("t5", "some/t5", "embed") == (
        "int8 does not support t5 models (some/t5); it supports BERT, DistilBERT, Gemma3, MPNet, Mistral, ModernBERT, "
        "Qwen3")


def test_embed_takes_int8_and_refuses_it_where_it_cannot_run(monkeypatch, tmp_path, capsys):
    from rose_embed.server.cli.main import main

    monkeypatch.setattr(cpu_features, "int8_dot_products", lambda: None)
    (tmp_path / "in.jsonl").write_text('{"text": "a"}\n')
    with pytest.raises(SystemExit) as exc:
        main(["embed", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "out.npy"), "--devices", "cpu",
              "--quantization", "int8", "--dtype", "bfloat16"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].startswith(
        "rose-embed embed: error: argument --quantization: int8 runs on a CPU with AVX512-VNNI or AMX-INT8; ")
    assert not (tmp_path / "out.npy").exists()


@pytest.mark.parametrize("settings, warms_up", [
    ({"quantization": "int8"}, True),
    ({"quantization": "int8", "enforce_eager": True}, False),
    ({}, False),
])
def test_the_corpus_engine_compiles_int8_before_the_job_starts(monkeypatch, settings, warms_up):
    # rose-embed embed's rate is timed from the job's first batch: an int8 model's compile (most of
    # a minute) must happen before it, in the engine's warm-up, not inside the first batch.
    from rose_embed.corpus import engine_setup

    calls = []

    class RecordingEngine:
        def __init__(self, config):
            self.config = config

        def warm_up(self):
            calls.append(self.config.quantization)

    monkeypatch.setattr(engine_setup, "Engine", RecordingEngine)
    engine_setup.build_engine(device="cpu", max_batch_tokens=512, **settings)
    assert calls == (["int8"] if warms_up else [])
