"""FP8 on a GPU with FP8 tensor cores (compute capability 8.9 or newer): the Triton kernels that
write FP8 rows against their references (engine/rose/quantization/fp8_fused.py), torch._scaled_mm
against the GEMM's float32 definition, and whole engines (bf16, CUDA graphs, the attention auto
picks, --quantization fp8) on tiny random BERT-family and Qwen3 checkpoints and on the default
model against the CPU simulation of the same scheme (tests/unit/test_fp8.py says what it is).
Skipped without such a GPU.

Tolerances. A kernel and its reference compute the activation they quantize in bf16 each, and
may round it a bf16 step apart; an e4m3 value then lands at most one e4m3 step apart, for a few
values in a hundred (tests/support/fp8_checks.py). The GEMM: within 2 % of the float32 definition per
row (L2), with or without fast accumulation. Whole models: rounding the activations to bf16
before quantizing them moves some values across an e4m3 rounding boundary, and the models
amplify that (a tiny random Qwen3 most: the same scheme in bf16 on the CPU lands at cosine 0.95
from its float32 simulation, BERT at 0.997, against 0.9997 and 0.9999 without FP8). So the
engine's drift from the float32 simulation (1 - min cosine) may be at most DRIFT_FACTOR times
the drift of the same scheme computed in bf16 on the CPU, plus DRIFT_FLOOR: the GPU path adds
no error beyond bf16's own rounding of the scheme. Graph replays against eager runs >= 0.99999.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from rose_embed.engine.contract.config import EngineConfig, Fp8Plan
from rose_embed.engine.rose.layers import fused
from rose_embed.engine.rose.quantization import cublaslt_fp8, fp8_fused
from rose_embed.engine.rose.quantization.fp8 import Fp8Linear, quantize_rows, scaled_matmul
from rose_embed.engine.rose.quantization.quantized_rows import (QuantizedRows, dequantize_rows, quantize_rows_at, quantize_rows_reference,
                                               quantize_tensor_reference)
from tests.support.fp8_checks import assert_rows_close
from tests.models.test_architectures import SPECS, cosines, corpus, texts  # noqa: F401 (fixtures)
from tests.gpu.test_fused_gpu import both


def _has_fp8_tensor_cores() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9)


pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not _has_fp8_tensor_cores(), reason="needs a GPU of compute capability 8.9 or newer")]

# The engines are held to their CPU simulation with weights rounded to nearest on both sides: GPTQ
# calibrated on bf16 activations (GPU) and on float32 ones (CPU) picks slightly different values,
# which would blur what these tests check (the kernels and the GEMM). GPTQ on the GPU has a test of its own.
EVERY_LINEAR = Fp8Plan(min_hidden_size=0, bf16_first_layers=0, bf16_last_layers=0, attention_output_min_hidden_size=0,
                       bf16_pooled_tokens=False, weight_rounding="nearest")
ATTENTION_OUTPUT_BF16 = replace(EVERY_LINEAR, attention_output_min_hidden_size=1 << 30)
POOLED_TOKENS_BF16 = replace(EVERY_LINEAR, bf16_pooled_tokens=True)
DRIFT_FACTOR, DRIFT_FLOOR = 3.0, 2e-4
GRAPH_TOLERANCE = 0.99999
# Kernel against reference: scales within a bf16 step of the row's largest value, values within an
# e4m3 step, and few of them.
KERNEL_SCALE_RTOL, KERNEL_SHARE_DIFFERING = 1e-2, 0.03


def _randn(*shape, seed: int, scale: float = 1.0) -> torch.Tensor:
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (scale * torch.randn(*shape, device="cuda", generator=g)).to(torch.bfloat16)


def _close_to_reference(got: QuantizedRows, want: QuantizedRows) -> None:
    assert_rows_close(got, want, scale_rtol=KERNEL_SCALE_RTOL, max_share_differing=KERNEL_SHARE_DIFFERING)


@pytest.mark.parametrize("num_tokens,n_cols", [(1, 384), (77, 2048), (4096, 4096), (300, 1000)])
def test_quantize_rows_kernel(num_tokens, n_cols):
    x = _randn(num_tokens, n_cols, seed=n_cols, scale=3.0)
    x[0, :7] = 0  # and a row of zeros where there are several rows
    if num_tokens > 1:
        x[1] = 0
    got, want = both(lambda: quantize_rows(x))
    assert_rows_close(got, want, scale_rtol=1e-6, max_share_differing=1e-3)  # the same input: all but exact


@pytest.mark.parametrize("num_tokens,hidden", [(1, 384), (513, 768), (4096, 1024), (300, 2560)])
def test_add_layer_norm_rows_kernel(num_tokens, hidden):
    x, residual = _randn(num_tokens, hidden, seed=1), _randn(num_tokens, hidden, seed=2)
    weight, bias = 1 + _randn(hidden, seed=3, scale=0.1), _randn(hidden, seed=4, scale=0.1)
    (out, rows), (out_ref, rows_ref) = both(lambda: fp8_fused.add_layer_norm_rows(x, residual, weight, bias, 1e-12))
    torch.testing.assert_close(out.float(), out_ref.float(), rtol=2e-2, atol=2e-2)
    _close_to_reference(rows, rows_ref)
    assert_rows_close(rows, quantize_rows_reference(out), scale_rtol=1e-6, max_share_differing=1e-3)


def _one_scale(rows: QuantizedRows) -> QuantizedRows:
    """Rows at one scale [1, 1] as rows of that scale each, for assert_rows_close."""
    return QuantizedRows(rows.values, rows.scales.expand(rows.values.shape[0], 1))


@pytest.mark.parametrize("num_tokens,hidden", [(1, 384), (513, 768), (4096, 1024)])
def test_add_layer_norm_rows_kernel_at_one_scale(num_tokens, hidden):
    x, residual = _randn(num_tokens, hidden, seed=1), _randn(num_tokens, hidden, seed=2)
    weight, bias = 1 + _randn(hidden, seed=3, scale=0.1), _randn(hidden, seed=4, scale=0.1)
    scale = torch.full((1, 1), 0.02, device="cuda")
    (out, rows), (out_ref, rows_ref) = both(lambda: fp8_fused.add_layer_norm_rows(x, residual, weight, bias, 1e-12,
                                                                                  scale))
    assert rows.scales is scale and rows_ref.scales is scale
    torch.testing.assert_close(out.float(), out_ref.float(), rtol=2e-2, atol=2e-2)
    _close_to_reference(_one_scale(rows), _one_scale(rows_ref))
    assert_rows_close(_one_scale(rows), _one_scale(quantize_rows_at(out, scale)), scale_rtol=0,
                      max_share_differing=1e-3)


@pytest.mark.parametrize("token_type", [True, False])
def test_embed_layer_norm_rows_kernel(token_type):
    hidden, vocab = 768, 1000
    word, position = _randn(vocab, hidden, seed=5), _randn(512, hidden, seed=6)
    types = _randn(hidden, seed=7) if token_type else None
    weight, bias = 1 + _randn(hidden, seed=8, scale=0.1), _randn(hidden, seed=9, scale=0.1)
    g = torch.Generator(device="cuda").manual_seed(10)
    ids = torch.randint(0, vocab, (700,), device="cuda", generator=g)
    positions = torch.randint(0, 500, (700,), device="cuda", generator=g)
    (out, rows), (out_ref, rows_ref) = both(lambda: fp8_fused.embed_layer_norm_rows(
        ids, positions, word, position, types, 2, weight, bias, 1e-12))
    torch.testing.assert_close(out.float(), out_ref.float(), rtol=2e-2, atol=2e-2)
    _close_to_reference(rows, rows_ref)
    assert_rows_close(rows, quantize_rows_reference(out), scale_rtol=1e-6, max_share_differing=1e-3)


@pytest.mark.parametrize("with_residual", [True, False])
@pytest.mark.parametrize("num_tokens,hidden", [(1, 1024), (4096, 1024), (300, 2560)])
def test_rms_norm_rows_kernel_updates_the_residual(with_residual, num_tokens, hidden):
    x, residual = _randn(num_tokens, hidden, seed=11), _randn(num_tokens, hidden, seed=12)
    weight = 1 + _randn(hidden, seed=13, scale=0.1)
    residuals = [residual.clone(), residual.clone()]
    calls = iter(residuals)
    rows, rows_ref = both(lambda: fp8_fused.rms_norm_rows(x, weight, 1e-6,
                                                          residual=next(calls) if with_residual else None))
    _close_to_reference(rows, rows_ref)
    if with_residual:
        torch.testing.assert_close(residuals[0], residuals[1], rtol=0, atol=0)
        torch.testing.assert_close(residuals[0], residual + x, rtol=0, atol=0)


@pytest.mark.parametrize("num_tokens,intermediate", [(1, 3072), (2048, 3072), (300, 9728), (77, 1000)])
def test_act_and_mul_rows_kernel(num_tokens, intermediate):
    gate_up = _randn(num_tokens, 2 * intermediate, seed=intermediate, scale=2.0)
    rows, rows_ref = both(lambda: fp8_fused.act_and_mul_rows(gate_up, "silu"))
    _close_to_reference(rows, rows_ref)


@pytest.mark.parametrize("activation", ["gelu", "gelu_tanh", "relu"])
@pytest.mark.parametrize("num_tokens,intermediate", [(1, 1536), (4096, 3072), (300, 1000)])
def test_activation_rows_kernel(activation, num_tokens, intermediate):
    x = _randn(num_tokens, intermediate, seed=intermediate + 1, scale=2.0)
    rows, rows_ref = both(lambda: fp8_fused.activation_rows(x, activation))
    _close_to_reference(rows, rows_ref)


@pytest.mark.parametrize("in_epilogue", [False, True], ids=["pass", "epilogue"])
@pytest.mark.parametrize("fast_accumulation", [True, False])
@pytest.mark.parametrize("activation", ["gelu", "gelu_tanh", "relu"])
@pytest.mark.parametrize("num_tokens,k,n,bias", [(1, 768, 3072, True), (4096, 768, 3072, True), (300, 64, 128, True),
                                                 (33, 1024, 4096, False), (129, 48, 96, True)])
def test_the_up_projection_that_quantizes_at_bounded_scales_is_its_reference(in_epilogue, fast_accumulation,
                                                                             activation, num_tokens, k, n, bias):
    linear = torch.nn.Linear(k, n, bias=bias, device="cuda", dtype=torch.bfloat16)
    layer = Fp8Linear(linear, fast_accumulation)
    rows = quantize_rows(_randn(num_tokens, k, seed=k + n))
    got, want = both(lambda: fp8_fused.linear_activation_rows(layer, rows, activation, in_epilogue))
    _close_to_reference(got, want)
    # The bounded scales hold every activated value without saturating.
    activated = fp8_fused.activation(layer(rows), activation).float()
    assert (activated.abs() <= 448 * got.scales).all()


@pytest.mark.parametrize("fast_accumulation", [True, False])
@pytest.mark.parametrize("activation", ["gelu", "gelu_tanh", "relu"])
@pytest.mark.parametrize("num_tokens,k,n", [(1, 768, 3072), (4096, 768, 3072), (512, 384, 1536), (130, 1024, 4096)])
def test_the_up_projection_at_one_scale_is_its_reference(fast_accumulation, activation, num_tokens, k, n):
    """cuBLASLt's GEMM with bias, GELU (tanh form) or ReLU and e4m3 output in its epilogue
    against the reference: the bf16 GEMM activated in float32, quantized at the same scale."""
    linear = torch.nn.Linear(k, n, device="cuda", dtype=torch.bfloat16)
    norm = torch.nn.LayerNorm(k, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        norm.weight.copy_(1 + _randn(k, seed=5, scale=0.2))
        norm.bias.copy_(_randn(k, seed=6, scale=0.2))
    layer = Fp8Linear(linear, fast_accumulation, input_norm=norm)
    x, residual = _randn(num_tokens, k, seed=k), _randn(num_tokens, k, seed=n)
    _, rows = fp8_fused.add_layer_norm_rows(x, residual, norm.weight, norm.bias, norm.eps, layer.input_scale)
    served = cublaslt_fp8.scaled_matmul(rows.values, rows.scales, layer.weight, layer.weight_scale, layer.bias,
                                        fp8_fused.EPILOGUE_ACTIVATIONS[activation], torch.float8_e4m3fn,
                                        layer.activation_scale_inverse, fast_accumulation, rowwise=False)
    if num_tokens % 16 == 0:  # as the engine's graphs have them: powers of two, multiples of 1024
        assert served is not None, "cuBLASLt served no GEMM with this epilogue: the engine would take the reference"
    got, want = both(lambda: fp8_fused.linear_activation_rows(layer, rows, activation))
    _close_to_reference(_one_scale(got), _one_scale(want))
    assert got.scales is layer.activation_scale and want.scales is layer.activation_scale
    assert got.values.float().abs().max() < 448  # the bound held: nothing saturated


@pytest.mark.parametrize("workspace_free", [True, False], ids=["cublaslt", "scaled_mm"])
@pytest.mark.parametrize("one_scale", [False, True], ids=["rowwise", "tensorwise"])
@pytest.mark.parametrize("fast_accumulation", [True, False])
@pytest.mark.parametrize("num_tokens,k,n,bias", [(1, 384, 1152, True), (77, 768, 3072, True),
                                                 (4096, 1024, 4096, False), (300, 9728, 2560, False)])
def test_scaled_mm_is_the_gemms_definition(workspace_free, one_scale, fast_accumulation, num_tokens, k, n, bias):
    linear = torch.nn.Linear(k, n, bias=bias, device="cuda", dtype=torch.bfloat16)
    layer = Fp8Linear(linear, fast_accumulation, one_scale=one_scale, workspace_free=workspace_free)
    x = _randn(num_tokens, k, seed=k)
    rows = quantize_tensor_reference(x) if one_scale else quantize_rows(x)
    out = layer(rows)
    assert out.dtype == torch.bfloat16 and out.shape == (num_tokens, n)
    got = out.float().cpu()
    on_cpu = QuantizedRows(rows.values.cpu(), rows.scales.cpu())
    want = scaled_matmul(on_cpu, layer.weight.cpu(), layer.weight_scale.cpu(),
                         None if layer.bias is None else layer.bias.float().cpu(), torch.float32, fast_accumulation)
    error = ((got - want).norm(dim=1) / want.norm(dim=1)).max().item()
    print(f"{num_tokens}x{k}->{n} {'one scale' if one_scale else 'rowwise'}, "
          f"{'fast' if fast_accumulation else 'promoted'} accumulation: "
          f"largest row error {error:.2e}")
    assert error <= 2e-2
    # And the definition itself is the dequantized product.
    want_too = dequantize_rows(on_cpu) @ dequantize_rows(QuantizedRows(layer.weight.cpu(),
                                                                      layer.weight_scale.cpu().t())).t()
    if layer.bias is not None:
        want_too += layer.bias.float().cpu()
    torch.testing.assert_close(want, want_too, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("one_scale", [False, True], ids=["rowwise", "tensorwise"])
@pytest.mark.parametrize("num_tokens,k,n,bias", [(16384, 1024, 6144, False), (4096, 768, 2304, True),
                                                 (1024, 9728, 2560, False), (48, 2048, 1024, False)])
def test_the_workspace_free_gemm_is_torchs(one_scale, num_tokens, k, n, bias):
    """The engine's GEMM, cuBLASLt's algorithm that needs no workspace, is served for the shapes
    the engine's graphs run (token counts in multiples of 16) and gives torch._scaled_mm's output
    to within bf16's rounding, so that leaving torch's choice of algorithm moves no vector."""
    linear = torch.nn.Linear(k, n, bias=bias, device="cuda", dtype=torch.bfloat16)
    layer = Fp8Linear(linear, one_scale=one_scale)
    x = _randn(num_tokens, k, seed=n)
    rows = quantize_tensor_reference(x) if one_scale else quantize_rows(x)
    served = cublaslt_fp8.scaled_matmul(rows.values, rows.scales, layer.weight, layer.weight_scale, layer.bias, None,
                                        torch.bfloat16, None, True, rowwise=not one_scale, workspace_limits=(0,))
    assert served is not None, "cuBLASLt has no algorithm without workspace for this GEMM: the engine takes torch's"
    want = torch._scaled_mm(rows.values, layer.weight.t(), scale_a=rows.scales, scale_b=layer.weight_scale,
                            bias=layer.bias, out_dtype=torch.bfloat16, use_fast_accum=True)
    torch.testing.assert_close(layer(rows), served, rtol=0, atol=0)
    error = ((served.float() - want.float()).norm(dim=1) / want.float().norm(dim=1)).max().item()
    assert error <= 4e-3, f"largest row error {error:.2e} against torch._scaled_mm"


def _engine(path, **overrides):
    from rose_embed.engine.rose.engine import Engine

    return Engine(EngineConfig(model=str(path), max_batch_tokens=2048, **overrides))


class Simulation:
    """The CPU's vectors of some texts: the float32 model, the FP8 scheme in float32 (its
    definition) and the FP8 scheme in bf16 (bf16's rounding around the same e4m3 roundings)."""

    def __init__(self, path, plan: Fp8Plan, texts: list[str]):
        from rose_embed.engine.rose.quantization.fp8_plan import quantize_model

        engine = _engine(path, device="cpu", dtype="float32")
        self.reference = engine.embed(texts)
        quantize_model(engine.runner.model, plan, engine.runner.head.pooling)
        self.float32 = engine.embed(texts)
        engine = _engine(path, device="cpu", dtype="bfloat16")
        quantize_model(engine.runner.model, plan, engine.runner.head.pooling)
        self.bf16 = engine.embed(texts)
        self.bf16_drift = 1 - cosines(self.bf16, self.float32).min()

    def check(self, label: str, vectors: np.ndarray) -> None:
        """vectors drift from the float32 simulation no further than bf16's rounding of the scheme allows."""
        drift = 1 - cosines(vectors, self.float32).min()
        print(f"{label}: engine vs its simulation {1 - drift:.5f} (bf16 on the CPU {1 - self.bf16_drift:.5f}); "
              f"vs float32: simulation {cosines(self.float32, self.reference).min():.5f}, "
              f"engine {cosines(vectors, self.reference).min():.5f}")
        assert drift <= DRIFT_FACTOR * self.bf16_drift + DRIFT_FLOOR, label


@pytest.fixture(scope="module", params=["bert", "roberta", "distilbert", "mpnet", "qwen3"])
def checkpoint(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param) / "model"
    return request.param, SPECS[request.param].save(path)


@pytest.mark.parametrize("plan", [EVERY_LINEAR, ATTENTION_OUTPUT_BF16], ids=["every-linear", "o_proj-bf16"])
def test_an_fp8_engine_is_its_cpu_simulation(checkpoint, texts, plan):
    arch, path = checkpoint
    simulation = Simulation(path, plan, texts)
    engine = _engine(path, device="cuda", quantization="fp8", fp8_plan=plan)
    assert engine.dtype == torch.bfloat16 and engine.runner.graphs is not None
    assert any(isinstance(m, Fp8Linear) for m in engine.runner.model.modules())
    engine.warm_up()
    runs = [engine.embed(texts) for _ in range(3)]  # eager, captured, replayed
    assert engine.runner.num_graph_replays > 0
    simulation.check(f"{arch}, {'every linear' if plan == EVERY_LINEAR else 'o_proj bf16'}", runs[-1])
    assert cosines(runs[-1], runs[0]).min() >= GRAPH_TOLERANCE
    # The kernels' references on the device (--no-fused-kernels) run the same scheme; last, as
    # the switch is process-wide.
    unfused = _engine(path, device="cuda", quantization="fp8", fp8_plan=plan, fused_kernels=False).embed(texts)
    fused.set_fused_kernels(True)
    simulation.check(f"{arch}, references on the GPU", unfused)


def test_pooled_tokens_kept_bf16_in_graphs_are_their_cpu_simulation(tmp_path, texts):
    """A last-token Qwen3 with the pooled tokens' rows bf16 (bf16_pooled_tokens): eager, captured and
    replayed graphs of every segment count hold to the CPU's simulation, and nearer the float32
    model than with every row in FP8."""
    path = SPECS["qwen3"].save(tmp_path / "model")
    simulation = Simulation(path, POOLED_TOKENS_BF16, texts)
    engine = _engine(path, device="cuda", quantization="fp8", fp8_plan=POOLED_TOKENS_BF16)
    assert engine.runner.model.fp8_pooled_tokens is not None
    engine.warm_up()
    runs = [engine.embed(texts) for _ in range(3)]
    assert engine.runner.num_graph_replays > 0
    simulation.check("qwen3, pooled tokens bf16", runs[-1])
    assert cosines(runs[-1], runs[0]).min() >= GRAPH_TOLERANCE
    every_row = _engine(path, device="cuda", quantization="fp8", fp8_plan=EVERY_LINEAR).embed(texts)
    assert (1 - cosines(runs[-1], simulation.reference)).mean() < (1 - cosines(every_row, simulation.reference)).mean()


def test_the_default_model_in_fp8_is_its_simulation():
    """all-MiniLM-L6-v2 with the plan's rules but its width floor (which keeps it bf16 by default);
    its weights may be a bf16 copy (docs/gpu-runs.md: how to carry them to a GPU machine)."""
    from rose_embed.engine.model_files.loader import resolve_model_dir
    from tests.conftest import load_texts

    path = resolve_model_dir(None)[0]
    if not (path / "model.safetensors").is_file():
        pytest.skip(f"the default model's weights are not in {path}")
    # Three bf16 layers, as wider models keep: nearest rounding holds the bound with them.
    plan = replace(Fp8Plan(), min_hidden_size=0, bf16_first_layers=3, weight_rounding="nearest")
    texts = load_texts(500)
    simulation = Simulation(path, plan, texts)
    engine = _engine(path, device="cuda", quantization="fp8", fp8_plan=plan)
    engine.warm_up()
    ours = engine.embed(texts)
    simulation.check("all-MiniLM-L6-v2 FP8", ours)
    assert cosines(ours, simulation.reference).min() >= 0.995  # the quality bound (docs/fp8.md)


def test_gptq_on_the_gpu_lands_nearer_float32_than_rounding_to_nearest(tmp_path, texts, caplog):
    """The engine's default rounding: GPTQ calibrated on the GPU, eagerly before any graph, then
    graphs of the GPTQ-rounded model; its vectors nearer the float32 model's than rounding to nearest."""
    path = SPECS["qwen3"].save(tmp_path / "model")
    reference = _engine(path, device="cpu", dtype="float32").embed(texts)
    with caplog.at_level("INFO", logger="rose_embed.engine"):
        gptq = _engine(path, device="cuda", quantization="fp8", fp8_plan=replace(EVERY_LINEAR, weight_rounding="gptq"))
    assert "weights rounded by GPTQ" in caplog.text
    gptq.warm_up()
    runs = [gptq.embed(texts) for _ in range(3)]
    assert gptq.runner.num_graph_replays > 0
    nearest = _engine(path, device="cuda", quantization="fp8", fp8_plan=EVERY_LINEAR).embed(texts)
    gptq_error, nearest_error = (1 - cosines(runs[-1], reference)).mean(), (1 - cosines(nearest, reference)).mean()
    print(f"qwen3 GPU, mean 1 - cosine vs float32: GPTQ {gptq_error:.5f}, nearest {nearest_error:.5f}")
    assert gptq_error < nearest_error
