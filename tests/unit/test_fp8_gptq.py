"""GPTQ's rounding of the FP8 weights (engine/rose/quantization/fp8_gptq.py) on the CPU: it keeps the scales of
rounding to nearest and only picks other e4m3 values, it lands a layer's outputs closer to the
unquantized layer's on inputs like those it saw, a stack of linears is rounded as each alone, the
rounding is the same however many passes over the texts it takes, and quantize_model uses it where
it is handed a way to run the model.
tests/models/test_fp8_quality.py holds the default model to the quality bounds with it.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np
import torch

from rose_embed.engine.contract.config import Fp8Plan
from rose_embed.engine.contract.batch import pack
from rose_embed.engine.rose.quantization.fp8_gptq import calibration_texts, gptq_rows, gptq_stack, gptq_weights
from rose_embed.engine.rose.quantization.fp8_plan import fp8_linear_names, quantize_model
from rose_embed.engine.rose.attention.ragged import SDPAPerSequenceBackend
from rose_embed.engine.rose.quantization.fp8 import Fp8Linear
from rose_embed.engine.rose.quantization.quantized_rows import FP8_DTYPE, dequantize_rows, quantize_rows_reference
from rose_embed.engine.rose.models import MODEL_CLASSES
from tests.support.qwen3_checkpoints import randomize

EVERY_LINEAR = Fp8Plan(min_hidden_size=0, bf16_first_layers=0, bf16_last_layers=0, attention_output_min_hidden_size=0)


def _correlated_inputs(rows: int, k: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    mix = torch.eye(k) + torch.randn(k, k, generator=g) / k ** 0.5  # inputs whose channels move together
    return torch.randn(rows, k, generator=g) @ mix


def _output_error(x: torch.Tensor, weight: torch.Tensor, rows) -> float:
    want = x @ weight.t()
    return float((x @ dequantize_rows(rows).t() - want).norm() / want.norm())


def test_gptq_keeps_the_scales_and_lands_the_outputs_closer_than_rounding_to_nearest():
    weight = torch.randn(96, 256, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16).float()
    inputs = _correlated_inputs(2560, 256, seed=2)
    calibration, held_out = inputs[:2048], inputs[2048:]  # held out: the same distribution, rows GPTQ never saw
    nearest = quantize_rows_reference(weight.to(torch.bfloat16))
    gptq = gptq_rows(weight, calibration.t() @ calibration / len(calibration))
    assert gptq.values.dtype == FP8_DTYPE and gptq.values.shape == (96, 256)
    assert torch.equal(gptq.scales, nearest.scales)
    assert not torch.equal(gptq.values.view(torch.uint8), nearest.values.view(torch.uint8))
    assert _output_error(held_out, weight, gptq) < 0.85 * _output_error(held_out, weight, nearest)


def test_weights_of_an_input_never_seen_are_zero():
    weight = torch.randn(16, 32, generator=torch.Generator().manual_seed(3))
    x = _correlated_inputs(256, 32, seed=4)
    x[:, 5] = 0
    rows = gptq_rows(weight, x.t() @ x / len(x))
    assert rows.values[:, 5].float().abs().sum() == 0
    assert rows.values[:, 4].float().abs().sum() > 0


def _bert(layers: int = 3, hidden: int = 64) -> torch.nn.Module:
    config = dict(vocab_size=97, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4,
                  intermediate_size=2 * hidden, max_position_embeddings=160, hidden_act="gelu", model_type="bert")
    model = MODEL_CLASSES["bert"](config)
    randomize(model, seed=5)
    return model.eval()


def _run_on_ids(model: torch.nn.Module, seed: int) -> torch.Tensor:
    """The model's hidden states [T, hidden] for random token ids (the embed a test hands in)."""
    rng = np.random.default_rng(seed)
    batch = pack([rng.integers(0, 97, n).astype(np.int32) for n in (40, 7, 64, 23, 51, 12)])
    attention = SDPAPerSequenceBackend(model.attention_shape(False))
    meta = attention.prepare(torch.from_numpy(batch.cu_seqlens), batch.cu_seqlens.tolist(), batch.max_seqlen)
    with torch.inference_mode():
        return model(torch.from_numpy(batch.input_ids), torch.from_numpy(batch.positions), attention, meta)


def _same_rounding(a, b) -> float:
    """The share of e4m3 values two roundings agree on, their scales required equal."""
    assert torch.equal(a.scales, b.scales)
    return float((a.values.view(torch.uint8) == b.values.view(torch.uint8)).float().mean())


def test_a_stack_of_linears_is_rounded_as_each_alone():
    g = torch.Generator().manual_seed(9)
    weights = torch.randn(3, 48, 160, generator=g).to(torch.bfloat16)
    inputs = [_correlated_inputs(512, 160, seed=10 + i) for i in range(3)]
    inputs[1][:, 7] = 0  # one input unseen in one linear alone
    hessians = torch.stack([x.t() @ x / len(x) for x in inputs])
    stacked = gptq_stack(weights, hessians, block=32)
    for i in range(3):
        alone = gptq_rows(weights[i], hessians[i], block=32)
        # The same steps in a batched matmul: a rare weight may land on the other side of a rounding tie.
        assert _same_rounding(stacked[i], alone) > 0.999
    assert stacked[1].values[:, 7].float().abs().sum() == 0


def test_the_rounding_is_the_same_in_one_pass_or_one_layer_to_a_pass():
    model = _bert()
    names = fp8_linear_names(model, EVERY_LINEAR)
    passes = []

    def embed(texts):
        passes.append(len(texts))
        return _run_on_ids(model, seed=6)

    whole = gptq_weights(model, names, embed, ["a text"])
    assert len(passes) == whole.passes == 1
    one_layer = gptq_weights(model, names, embed, ["a text"], budget=1)
    assert len(passes) == 1 + len(names) and one_layer.passes == len(names)  # a budget below any linear's: one to a pass
    whole, one_layer = whole.rows, one_layer.rows
    assert whole.keys() == one_layer.keys() == set(names)
    for name in names:
        assert _same_rounding(whole[name], one_layer[name]) > 0.999
    # the model runs as it did: no recorder is left in it
    assert not any(type(m).__name__ == "_SecondMoments" for m in model.modules())


def test_quantize_model_rounds_by_gptq_where_it_can_run_the_model_and_says_so():
    plain = _bert()
    reference = _run_on_ids(plain, seed=7)

    def error(plan, embed):
        model = copy.deepcopy(plain)
        line = quantize_model(model, plan, embed=embed and (lambda texts: embed(model)))
        out = _run_on_ids(model, seed=7)
        return line, model, float(1 - torch.nn.functional.cosine_similarity(out, reference, dim=-1).mean())

    gptq_line, gptq_model, gptq_error = error(EVERY_LINEAR, lambda model: _run_on_ids(model, seed=8))
    nearest_line, nearest_model, nearest_error = error(EVERY_LINEAR, None)
    assert f"weights rounded by GPTQ on {len(calibration_texts())} built-in texts" in gptq_line
    assert "1 pass(es) over the texts" in gptq_line
    assert "weights rounded to nearest" in nearest_line
    asked_nearest = error(replace(EVERY_LINEAR, weight_rounding="nearest"), lambda model: _run_on_ids(model, seed=8))
    assert "weights rounded to nearest" in asked_nearest[0] and asked_nearest[2] == nearest_error
    fp8 = [name for name, m in gptq_model.named_modules() if isinstance(m, Fp8Linear)]
    assert len(fp8) == 12
    for name in fp8:
        assert torch.equal(gptq_model.get_submodule(name).weight_scale, nearest_model.get_submodule(name).weight_scale)
    assert gptq_error < nearest_error
