"""The FP8 scheme on the CPU, where it runs as its own simulation (docs/fp8.md): the quantization
rule, the FP8 linear layer against its float32 definition, which layers the plan turns to FP8,
and whole tiny BERT and Qwen3 models whose FP8 path must equal an independent fake quantization
of the float32 model (every F.linear's input and weight round-tripped through e4m3 by the rule),
so that each linear reads the quantized form of exactly the activation the bf16 model feeds it.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from rose_embed.engine.contract.batch import pack
from rose_embed.engine.contract.config import (NARROW_BF16_FIRST_LAYERS, POST_NORM_BF16_FIRST_LAYERS, WIDE_BF16_ATTENTION_FIRST_LAYERS,
                           WIDE_BF16_FIRST_LAYERS, Fp8Plan)
from rose_embed.engine.rose.quantization.fp8_plan import (bf16_attention_first_layers, bf16_first_layers, fp8_linear_names, keeps_pooled_tokens,
                                  quantize_model)
from rose_embed.engine.rose.attention.ragged import SDPAPerSequenceBackend
from rose_embed.engine.rose.quantization.fp8 import Fp8Linear, wants_rows
from rose_embed.engine.rose.layers.pooling import pooled_token_rows
from rose_embed.engine.rose.quantization.quantized_rows import (FP8_DTYPE, FP8_MAX, dequantize_rows, quantize_rows_at,
                                                quantize_rows_reference, quantize_tensor_reference)
from rose_embed.engine.rose.models import MODEL_CLASSES
from rose_embed.engine.rose.models.bert import BertLayer
from tests.support.qwen3_checkpoints import randomize

EVERY_LINEAR = Fp8Plan(min_hidden_size=0, bf16_first_layers=0, bf16_last_layers=0, attention_output_min_hidden_size=0,
                       bf16_pooled_tokens=False)


def test_each_rows_largest_magnitude_lands_on_e4m3s_largest_value():
    g = torch.Generator().manual_seed(0)
    magnitudes = torch.tensor([1e-3, 1.0, 10.0, 1e3, 0.0, 1.0])[:, None]
    x = torch.randn(6, 100, generator=g) * magnitudes
    x[5, 3] = 50.0  # one outlier
    rows = quantize_rows_reference(x)
    assert rows.values.dtype == FP8_DTYPE and rows.scales.dtype == torch.float32 and rows.scales.shape == (6, 1)
    largest = rows.values.float().abs().amax(dim=1)
    assert torch.equal(largest[[0, 1, 2, 3, 5]], torch.full((5,), FP8_MAX))
    assert largest[4] == 0 and rows.scales[4] > 0  # a zero row: zeros, at a positive scale
    torch.testing.assert_close(rows.scales[:, 0], x.abs().amax(dim=1).clamp(min=1e-12) / FP8_MAX, rtol=0, atol=0)
    # Rounding to 3 mantissa bits: within 2^-4 of each value, relative, down to 2^-6 of a row's largest.
    back = dequantize_rows(rows)
    normal = x.abs() >= x.abs().amax(dim=1, keepdim=True) * 2.0 ** -6
    assert ((back - x).abs() <= 2.0 ** -4 * x.abs() + 1e-12)[normal].all()


@pytest.mark.parametrize("bias", [True, False])
def test_an_fp8_linear_is_its_float32_definition(bias):
    torch.manual_seed(1)
    linear = nn.Linear(64, 48, bias=bias)
    x = torch.randn(10, 64)
    layer = Fp8Linear(linear)
    assert layer.weight.dtype == FP8_DTYPE and layer.weight.shape == (48, 64) and layer.weight_scale.shape == (1, 48)
    weight = dequantize_rows(quantize_rows_reference(linear.weight.detach().to(torch.bfloat16)))
    want = F.linear(dequantize_rows(quantize_rows_reference(x)), weight, linear.bias)
    torch.testing.assert_close(layer(x), want, rtol=1e-6, atol=1e-6)
    assert torch.equal(layer(quantize_rows_reference(x)), layer(x))  # rows given, or made from the tensor
    cosine = F.cosine_similarity(layer(x), linear(x), dim=-1)
    assert cosine.min() >= 0.998, cosine  # two e4m3 roundings per product: the scheme's error on one GEMM


def test_one_scale_weights_share_the_scale_of_their_largest_magnitude():
    torch.manual_seed(2)
    linear = nn.Linear(64, 48)
    layer = Fp8Linear(linear, input_norm=nn.LayerNorm(64))
    assert layer.one_scale and layer.weight_scale.shape == (1, 1)
    weight = linear.weight.detach().to(torch.bfloat16).float()
    assert layer.weight_scale.item() == pytest.approx(weight.abs().max().item() / FP8_MAX, rel=1e-6)
    assert layer.weight.float().abs().max() == FP8_MAX
    x = torch.randn(5, 64)
    want = F.linear(dequantize_rows(quantize_rows_at(x, layer.input_scale)),
                    layer.weight.float() * layer.weight_scale, linear.bias)
    torch.testing.assert_close(layer(x), want, rtol=1e-6, atol=1e-6)
    with pytest.raises(RuntimeError, match=r"at one scale got an input at scales \(5, 1\) for 5 rows"):
        layer(quantize_rows_reference(x))
    with pytest.raises(RuntimeError, match=r"at scales per row got an input at scales \(1, 1\) for 5 rows"):
        Fp8Linear(linear)(quantize_rows_at(x, layer.input_scale))
    # Without a norm to bound its input, a tensor is quantized at its own largest magnitude's scale.
    after = Fp8Linear(linear, one_scale=True)
    assert not after.input_norm_bounded and torch.equal(after(x), after(quantize_tensor_reference(x)))


@pytest.mark.parametrize("activation", ["gelu_tanh", "relu"])
def test_the_one_scale_bounds_hold_for_the_worst_inputs(activation):
    """An up projection at one scale per operand quantizes its input and its activated output at
    scales fixed at load, which must bound every value any input can produce (else e4m3
    saturates) and not by much more (else small values lose precision). The worst cases are
    built: for the input, a normalised row with all its weight on one feature; for output j, the
    normalised row pointing along weight_j * norm weight (Cauchy-Schwarz's equality case)."""
    from rose_embed.engine.rose.quantization.fp8_fused import linear_activation_rows

    torch.manual_seed(3)
    hidden, inner = 64, 96
    norm = nn.LayerNorm(hidden)
    with torch.no_grad():
        norm.weight.uniform_(0.2, 3.0)
        norm.bias.normal_(0.0, 0.5)
    linear = nn.Linear(hidden, inner)
    layer = Fp8Linear(linear, input_norm=norm)
    gamma, beta = norm.weight.detach(), norm.bias.detach()

    spikes = torch.eye(hidden) * hidden - 1.0  # rows of one large value, the rest equal: normalised, a spike
    spiked = F.layer_norm(spikes, (hidden,), gamma, beta, norm.eps)
    input_bound = layer.input_scale.item() * FP8_MAX
    assert spiked.abs().max() <= input_bound <= 1.05 * spiked.abs().max()

    weight = layer.weight.float() * layer.weight_scale
    folded = weight * gamma
    folded = folded - folded.mean(dim=1, keepdim=True)
    direction = torch.sign(weight @ beta + linear.bias.detach())[:, None]
    worst = F.layer_norm(direction * folded / folded.norm(dim=1, keepdim=True) * hidden ** 0.5, (hidden,),
                         gamma, beta, norm.eps)
    rows = quantize_rows_at(worst, layer.input_scale)
    h = F.linear(dequantize_rows(rows), weight, linear.bias)
    reached = {"gelu_tanh": F.gelu(h, approximate="tanh"), "relu": F.relu(h)}[activation].abs().max()
    output_bound = layer.activation_scale.item() * FP8_MAX
    print(f"{activation}: reached {reached:.4f} of bound {output_bound:.4f}")
    assert reached <= output_bound <= 1.2 * reached
    out = linear_activation_rows(layer, rows, activation)
    assert out.values.float().abs().max() < FP8_MAX  # nothing saturated
    assert out.scales is layer.activation_scale  # the one scale its down projection reads


def _bert(layers: int = 4, hidden_act: str = "gelu", hidden: int = 64) -> nn.Module:
    config = dict(vocab_size=97, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4,
                  intermediate_size=2 * hidden, max_position_embeddings=160, hidden_act=hidden_act, model_type="bert")
    model = MODEL_CLASSES["bert"](config)
    randomize(model, seed=3)
    return model.eval()


def _qwen3(layers: int = 3) -> nn.Module:
    config = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=layers, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, max_position_embeddings=160, rope_theta=1234.0)
    model = MODEL_CLASSES["qwen3"](config)
    randomize(model, seed=4)
    return model.eval()


def test_the_plan_keeps_narrow_models_edge_layers_and_narrow_attention_outputs_bf16():
    assert fp8_linear_names(_bert(hidden=384, layers=2), Fp8Plan()) == []  # MiniLM's width: FP8 does not pay
    # BERT-base's width pays: every linear but the o_projs (post-norm: no bf16 layer at the start).
    assert fp8_linear_names(_bert(hidden=768, layers=2), Fp8Plan()) == [
        f"layers.{i}.{name}" for i in (0, 1) for name in ("qkv_proj", "up_proj", "down_proj")]
    wide = _bert(layers=4, hidden=512)
    narrow_floor = Fp8Plan(min_hidden_size=512, bf16_first_layers=1, bf16_last_layers=1)
    assert fp8_linear_names(wide, narrow_floor) == [f"layers.{i}.{name}" for i in (1, 2)
                                                    for name in ("qkv_proj", "up_proj", "down_proj")]
    with_o = fp8_linear_names(wide, replace(narrow_floor, attention_output_min_hidden_size=512, bf16_first_layers=0, bf16_last_layers=0))
    assert len(with_o) == 16 and "layers.0.o_proj" in with_o
    qwen3 = fp8_linear_names(_qwen3(layers=3), Fp8Plan(min_hidden_size=0, attention_output_min_hidden_size=0,
                                                       bf16_first_layers=1, bf16_last_layers=1))
    assert qwen3 == [f"layers.1.{name}" for name in ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj",
                                                      "mlp.down_proj")]


def test_the_first_layers_kept_bf16_follow_the_model_unless_counted():
    narrow = Fp8Plan(min_hidden_size=0, attention_output_min_hidden_size=1024)
    assert bf16_first_layers(narrow, 512) == NARROW_BF16_FIRST_LAYERS == 1
    assert bf16_first_layers(narrow, 1024) == WIDE_BF16_FIRST_LAYERS == 2
    assert bf16_first_layers(narrow, 1024, post_norm=True) == POST_NORM_BF16_FIRST_LAYERS == 0
    assert bf16_first_layers(replace(narrow, bf16_first_layers=2), 1024, post_norm=True) == 2
    # wide pre-norm models keep the next layer's attention bf16 too; a counted plan keeps exactly its layers
    assert bf16_attention_first_layers(narrow, 1024) == WIDE_BF16_ATTENTION_FIRST_LAYERS == 3
    assert bf16_attention_first_layers(narrow, 512) == 1
    assert bf16_attention_first_layers(narrow, 1024, post_norm=True) == 0
    assert bf16_attention_first_layers(replace(narrow, bf16_first_layers=2), 1024) == 2
    assert bf16_attention_first_layers(replace(narrow, bf16_first_layers=4), 1024) == 4
    kinds = ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj")
    pre_norm = _qwen3(layers=5)  # 64 wide
    wide = fp8_linear_names(pre_norm, replace(narrow, attention_output_min_hidden_size=64))
    assert wide == [f"layers.{i}.{name}" for i in (2, 3, 4) for name in kinds if i > 2 or name.startswith("mlp.")]
    assert fp8_linear_names(pre_norm, narrow) == [f"layers.{i}.{name}" for i in (1, 2, 3, 4)
                                                  for name in kinds if name != "self_attn.o_proj"]
    post_norm = fp8_linear_names(_bert(layers=5, hidden=128), replace(narrow, attention_output_min_hidden_size=128))
    assert post_norm == [f"layers.{i}.{name}" for i in range(5) for name in ("qkv_proj", "o_proj", "up_proj",
                                                                              "down_proj")]


def test_the_pooled_tokens_are_kept_bf16_on_wide_models_unless_asked_otherwise():
    plan = Fp8Plan(min_hidden_size=0, bf16_first_layers=0, attention_output_min_hidden_size=128)
    assert not keeps_pooled_tokens(plan, 64) and keeps_pooled_tokens(plan, 128)
    assert keeps_pooled_tokens(replace(plan, bf16_pooled_tokens=True), 64)
    assert not keeps_pooled_tokens(replace(plan, bf16_pooled_tokens=False), 128)
    narrow, wide = _qwen3(), _qwen3()  # 64 wide
    quantize_model(narrow, replace(plan, attention_output_min_hidden_size=65), pooling="last")
    assert narrow.fp8_pooled_tokens is None
    line = quantize_model(wide, replace(plan, attention_output_min_hidden_size=64), pooling="last")
    assert wide.fp8_pooled_tokens is not None and "rows of the pooled (last) tokens" in line


def test_the_plan_keeps_the_first_three_layers_bf16_and_whole_kinds_on_request():
    wide = _bert(layers=5, hidden=512)
    plan = Fp8Plan(min_hidden_size=512, bf16_first_layers=3)  # o_proj bf16 at this width
    assert fp8_linear_names(wide, plan) == [f"layers.{i}.{name}" for i in (3, 4)
                                            for name in ("qkv_proj", "up_proj", "down_proj")]
    plan = replace(plan, bf16_last_layers=1)
    assert fp8_linear_names(wide, plan) == [f"layers.3.{name}" for name in ("qkv_proj", "up_proj", "down_proj")]
    no_down = fp8_linear_names(wide, Fp8Plan(min_hidden_size=512, bf16_first_layers=1, bf16_last_layers=1,
                                             bf16_linears=("down_proj",)))
    assert no_down == [f"layers.{i}.{name}" for i in (1, 2, 3) for name in ("qkv_proj", "up_proj")]
    line = quantize_model(_bert(layers=5, hidden=512), replace(plan, bf16_linears=("qkv_proj",)))
    assert line.startswith("FP8: 2 of 20 linear layers") and "the first 3 and last 1 layer(s)" in line
    assert line.endswith("qkv_proj everywhere)")


def test_the_edge_layers_keep_only_the_kinds_named_bf16_where_the_plan_names_some():
    kinds = ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj")
    plan = Fp8Plan(min_hidden_size=0, attention_output_min_hidden_size=0, bf16_first_layers=2, bf16_last_layers=1,
                   edge_bf16_linears=("qkv_proj", "o_proj"))
    names = fp8_linear_names(_qwen3(layers=4), plan)
    assert names == [f"layers.{i}.{name}" for i in range(4) for name in kinds
                     if i == 2 or not name.startswith("self_attn.")]
    assert fp8_linear_names(_qwen3(layers=4), replace(plan, edge_bf16_linears=None)) == [
        f"layers.2.{name}" for name in kinds]


def test_the_first_attention_layers_kept_bf16_extend_past_the_bf16_first_layers():
    kinds = ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj")
    plan = Fp8Plan(min_hidden_size=0, attention_output_min_hidden_size=0, bf16_first_layers=1,
                   bf16_attention_first_layers=3)
    names = fp8_linear_names(_qwen3(layers=4), plan)
    assert names == [f"layers.{i}.{name}" for i in (1, 2, 3) for name in kinds
                     if i == 3 or name.startswith("mlp.")]
    # fewer than the bf16 first layers changes nothing: those keep every linear bf16
    assert fp8_linear_names(_qwen3(layers=4), replace(plan, bf16_attention_first_layers=0)) == \
        fp8_linear_names(_qwen3(layers=4), replace(plan, bf16_attention_first_layers=None)) == [
            f"layers.{i}.{name}" for i in (1, 2, 3) for name in kinds]
    line = quantize_model(_qwen3(layers=4), plan)
    assert line.startswith("FP8: 8 of 16 linear layers")
    assert "the first 1 and last 0 layer(s), the attention of the first 3," in line


def test_quantize_model_replaces_what_the_plan_names_and_says_so():
    model = _bert(layers=3)
    line = quantize_model(model, Fp8Plan(min_hidden_size=0, bf16_first_layers=1, bf16_last_layers=1))
    assert line.startswith("FP8: 3 of 12 linear layers run as e4m3 GEMMs (down_proj, qkv_proj, up_proj")
    layers = model.layers
    assert [wants_rows(layers[i].qkv_proj) for i in range(3)] == [False, True, False]
    assert not wants_rows(layers[1].o_proj)
    assert all(isinstance(b, torch.Tensor) and b.dtype == FP8_DTYPE for n, b in model.named_buffers() if
               n.endswith(".weight"))
    assert "no linear layer runs FP8" in quantize_model(_bert(hidden=384, layers=2), Fp8Plan())


_LENGTHS = (1, 9, 40, 130, 17)  # the sequences of _run's batch
_LAST_TOKENS = torch.tensor(np.cumsum(_LENGTHS) - 1)  # their last tokens' rows


def _run(model: nn.Module, is_causal: bool = False) -> torch.Tensor:
    rng = np.random.default_rng(0)
    batch = pack([rng.integers(0, 97, n).astype(np.int32) for n in _LENGTHS])
    attention = SDPAPerSequenceBackend(model.attention_shape(is_causal))
    meta = attention.prepare(torch.from_numpy(batch.cu_seqlens), batch.cu_seqlens.tolist(), batch.max_seqlen)
    with torch.inference_mode():
        return model(torch.from_numpy(batch.input_ids), torch.from_numpy(batch.positions), attention, meta)


def _fake_linear(model: nn.Module, fp8_weights: set[int] | None = None, quantized: nn.Module | None = None):
    """F.linear with its input and weight round-tripped through e4m3 (where `fp8_weights`, ids of
    weights, name the linear, else every one). Each input row at the scale putting its largest
    magnitude on 448, but a BERT down projection's input: its up projection's GEMM quantizes
    that activation at a scale bounded before the GEMM runs, from its own input's scale: every
    input value is at most 448 * that scale, so an output is at most 448 * scale * the largest
    row sum of |weight| + the largest |bias|, and GELU adds at most 0.17, all grown by 2^-6.

    Where `quantized` (the FP8 model made from `model`) runs an up projection at one scale per
    operand, that projection's weight takes one scale, its input the layer's input_scale and,
    where its down projection is FP8 too, the down projection's weight one scale and its input
    the up projection's activation_scale, with GELU in its tanh form (_one_scale_ups sets it on
    `model`): the scales are the quantized model's, which
    test_the_one_scale_bounds_hold_for_the_worst_inputs holds to their meaning."""
    linear = F.linear
    down_of_up = {id(layer.up_proj.weight): id(layer.down_proj.weight) for layer in model.layers
                  if isinstance(layer, BertLayer)}
    one_scale = _one_scale_ups(model, quantized) if quantized is not None else {}
    down_scales = {}

    def fake(x, weight, bias=None):
        if fp8_weights is not None and id(weight) not in fp8_weights:
            return linear(x, weight, bias)
        whole = dequantize_rows(quantize_tensor_reference(weight.to(torch.bfloat16)))
        if id(weight) in one_scale:
            input_scale, activation_scale = one_scale[id(weight)]
            if id(weight) in down_of_up and (fp8_weights is None or down_of_up[id(weight)] in fp8_weights):
                down_scales[down_of_up[id(weight)]] = ("one scale", activation_scale)
            return linear(dequantize_rows(quantize_rows_at(x, input_scale)), whole, bias)
        if isinstance(down_scales.get(id(weight)), tuple):  # the down projection of an up at one scale
            return linear(dequantize_rows(quantize_rows_at(x, down_scales.pop(id(weight))[1])), whole, bias)
        quantized_weight = dequantize_rows(quantize_rows_reference(weight.to(torch.bfloat16)))
        scales = down_scales.pop(id(weight), None)
        rows = quantize_rows_reference(x) if scales is None else quantize_rows_at(x, scales)
        if id(weight) in down_of_up and (fp8_weights is None or down_of_up[id(weight)] in fp8_weights):
            grown = 1 + 2.0 ** -6
            largest_bias = 0.0 if bias is None else bias.abs().max().item()
            down_scales[down_of_up[id(weight)]] = (rows.scales * (quantized_weight.abs().sum(dim=1).max().item() * grown)
                                                   + (largest_bias + 0.17) * grown / FP8_MAX)
        return linear(dequantize_rows(rows), quantized_weight, bias)

    return fake


def _one_scale_ups(model: nn.Module, quantized: nn.Module) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """The up projections `quantized` runs at one scale per operand: the id of `model`'s weight ->
    (input scale, activation scale). Where such a layer's down projection is FP8 too, `model`'s
    layer takes GELU's tanh form, as the GEMM's epilogue has it."""
    ups = {}
    for plain, layer in zip(model.layers, quantized.layers):
        if isinstance(layer.up_proj, Fp8Linear) and layer.up_proj.one_scale:
            ups[id(plain.up_proj.weight)] = (layer.up_proj.input_scale, layer.up_proj.activation_scale)
            if isinstance(layer.down_proj, Fp8Linear) and plain.gelu_form is not None:
                plain.gelu_form = "tanh"
    return ups


def _fake_quantized(model: nn.Module, monkeypatch, is_causal: bool = False, quantized: nn.Module | None = None
                    ) -> torch.Tensor:
    """The float32 model with every F.linear's input and weight round-tripped through e4m3 (_fake_linear)."""
    with monkeypatch.context() as patch:
        patch.setattr(torch.nn.functional, "linear", _fake_linear(model, quantized=quantized))
        return _run(model, is_causal)


@pytest.mark.parametrize("one_scale", [True, False], ids=["one-scale-up", "rows-up"])
@pytest.mark.parametrize("hidden_act", ["gelu", "gelu_new", "relu"])
def test_an_fp8_bert_is_the_fake_quantized_float32_bert(hidden_act, one_scale, monkeypatch):
    model = _bert(hidden_act=hidden_act)
    reference, exact = copy.deepcopy(model), _run(model)
    quantize_model(model, replace(EVERY_LINEAR, one_scale_up_projections=one_scale))
    assert [(layer.up_proj.one_scale, layer.down_proj.one_scale) for layer in model.layers] == [(one_scale,) * 2] * 4
    assert not any(layer.qkv_proj.one_scale for layer in model.layers)
    ours = _run(model)
    torch.testing.assert_close(ours, _fake_quantized(reference, monkeypatch, quantized=model), rtol=1e-5, atol=1e-5)
    # Per token, on random weights far from their init: FP8 stays near the float32 model.
    assert F.cosine_similarity(ours, exact, dim=-1).min() >= 0.95


@pytest.mark.parametrize("is_causal", [True, False])
def test_an_fp8_qwen3_is_the_fake_quantized_float32_qwen3(is_causal, monkeypatch):
    model = _qwen3()
    reference = copy.deepcopy(model)
    quantize_model(model, EVERY_LINEAR)
    ours = _run(model, is_causal)
    torch.testing.assert_close(ours, _fake_quantized(reference, monkeypatch, is_causal), rtol=1e-5, atol=1e-5)
    # Per token, on random weights far from their init: FP8 stays near the float32 model.
    assert F.cosine_similarity(ours, _run(reference, is_causal), dim=-1).min() >= 0.95


def test_mixed_layers_pass_bf16_or_rows_between_them(monkeypatch):
    """The default plan's shape: bf16 edge layers around FP8 ones, o_proj bf16; the FP8 layers
    equal the fake-quantized ones and the bf16 layers the float32 ones."""
    model = _bert(layers=3)
    reference = copy.deepcopy(model)
    quantize_model(model, Fp8Plan(min_hidden_size=0, bf16_first_layers=1, bf16_last_layers=1))
    fp8_weights = {id(reference.layers[1].get_submodule(n).weight) for n in ("qkv_proj", "up_proj", "down_proj")}
    ours = _run(model)
    with monkeypatch.context() as patch:
        patch.setattr(torch.nn.functional, "linear", _fake_linear(reference, fp8_weights, quantized=model))
        want = _run(reference)
    torch.testing.assert_close(ours, want, rtol=1e-5, atol=1e-5)


def _fake_quantized_but(rows: torch.Tensor, model: nn.Module, monkeypatch) -> torch.Tensor:
    """The causal float32 model with every F.linear's input and weight round-tripped through
    e4m3, but for `rows`, which every F.linear computes unquantized."""
    linear = F.linear

    def fake(x, weight, bias=None):
        quantized = dequantize_rows(quantize_rows_reference(weight.to(torch.bfloat16)))
        out = linear(dequantize_rows(quantize_rows_reference(x)), quantized, bias)
        out[rows] = linear(x[rows], weight, bias)
        return out

    with monkeypatch.context() as patch:
        patch.setattr(torch.nn.functional, "linear", fake)
        return _run(model, is_causal=True)


POOLED_TOKENS_BF16 = replace(EVERY_LINEAR, bf16_pooled_tokens=True)


def test_pooled_token_rows_name_each_segments_first_or_last_token():
    segment_ids = torch.tensor([0, 0, 0, -1, 1, 1, 2, -1])  # -1: a token no segment reads
    assert pooled_token_rows(segment_ids, 4, "last").tolist() == [2, 5, 6, 0]  # segment 3 is padding: a valid row
    assert pooled_token_rows(segment_ids, 4, "cls").tolist() == [0, 4, 6, 7]
    with pytest.raises(ValueError, match="more than one token"):
        pooled_token_rows(segment_ids, 4, "mean")


def test_the_pooled_tokens_rows_are_the_unquantized_linears(monkeypatch):
    """bf16_pooled_tokens on a last-token Qwen3: each FP8 linear's rows of the last tokens are the
    unquantized linear's of the same input, every other row the fake-quantized one; so the
    pooled rows come nearer the float32 model's than with every row in FP8."""
    model = _qwen3()
    reference = copy.deepcopy(model)
    quantize_model(model, POOLED_TOKENS_BF16, pooling="last")
    model.fp8_pooled_tokens.index = _LAST_TOKENS
    ours = _run(model, is_causal=True)
    torch.testing.assert_close(ours, _fake_quantized_but(_LAST_TOKENS, reference, monkeypatch), rtol=1e-5, atol=1e-5)
    exact, every_row_fp8 = _run(reference, is_causal=True), _fake_quantized(reference, monkeypatch, is_causal=True)
    pooled = _LAST_TOKENS

    def error(vectors: torch.Tensor) -> torch.Tensor:
        return 1 - F.cosine_similarity(vectors[pooled], exact[pooled], dim=-1)

    assert error(ours).mean() < 0.5 * error(every_row_fp8).mean()


def test_a_linear_that_keeps_the_pooled_tokens_refuses_a_batch_without_them():
    model = _qwen3()
    quantize_model(model, POOLED_TOKENS_BF16, pooling="last")
    with pytest.raises(RuntimeError, match="pooled tokens"):
        _run(model, is_causal=True)  # nobody set PooledTokens.index


def test_the_pooled_tokens_stay_fp8_where_one_token_is_not_pooled_or_the_model_cannot():
    model = _qwen3()
    line = quantize_model(model, POOLED_TOKENS_BF16, pooling="mean")
    assert model.fp8_pooled_tokens is None and "pooled tokens' rows run FP8 too" in line
    assert all(m.pooled is None for m in model.modules() if isinstance(m, Fp8Linear))
    bert = _bert(layers=2)
    assert "this model's: cls" in quantize_model(bert, POOLED_TOKENS_BF16, pooling="cls")
    assert bert.fp8_pooled_tokens is None
    model = _qwen3()
    line = quantize_model(model, POOLED_TOKENS_BF16, pooling="last")
    linears = [m for m in model.modules() if isinstance(m, Fp8Linear)]
    assert len(linears) == 12 and all(m.pooled is model.fp8_pooled_tokens for m in linears)
    assert "rows of the pooled (last) tokens" in line


@pytest.mark.slow
def test_the_runner_hands_each_batch_its_pooled_tokens(tmp_path, monkeypatch):
    """Through the engine: batched texts, whose pooled rows the runner finds from the head's
    pooling, give what each text alone gives with its last row computed unquantized."""
    from rose_embed.engine.contract.config import EngineConfig
    from rose_embed.engine.rose.engine import Engine
    from tests.models.test_architectures import SPECS

    path = SPECS["qwen3"].save(tmp_path / "model")
    texts = ["x", "Return the sum of a and b.", "A longer text, " * 20, "Split the string at each comma."]
    engine = Engine(EngineConfig(model=str(path), device="cpu", dtype="float32"))
    assert engine.runner.head.pooling == "last"
    quantize_model(engine.runner.model, POOLED_TOKENS_BF16, engine.runner.head.pooling)
    ours = engine.embed(texts)
    alone = Engine(EngineConfig(model=str(path), device="cpu", dtype="float32"))
    linear = F.linear

    def fake(x, weight, bias=None):  # one text to a batch: its last row is the pooled one
        quantized = dequantize_rows(quantize_rows_reference(weight.to(torch.bfloat16)))
        out = linear(dequantize_rows(quantize_rows_reference(x)), quantized, bias)
        out[-1] = linear(x[-1], weight, bias)
        return out

    with monkeypatch.context() as patch:
        patch.setattr(torch.nn.functional, "linear", fake)
        want = np.concatenate([alone.embed([text]) for text in texts])
    np.testing.assert_allclose(ours, want, rtol=0, atol=1e-5)
