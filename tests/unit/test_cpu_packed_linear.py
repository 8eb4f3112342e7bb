"""bf16 linears packed into oneDNN's layout (engine/rose/layers/cpu_packed_linear.py): the same products'
bits as torch's linear, the GELU epilogue within a bf16 step of the two-pass GELU, float32 and special
linears left alone, and a bf16 engine's vectors on the CPU equal to the unpacked engine's."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from rose_embed.engine.rose.layers.cpu_packed_linear import PackedLinear, can_pack, pack_linears

pytestmark = pytest.mark.skipif(not can_pack(), reason="needs oneDNN's fused linear with bf16 on this CPU")


class _Special(nn.Linear):
    """A subclass (as a quantized linear would be) keeps its own forward."""


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.ModuleDict({"up": nn.Linear(48, 96), "down": nn.Linear(96, 48, bias=False), "special": _Special(48, 8),
                          "fp32": nn.Linear(48, 8)})


def test_bf16_linears_are_packed_and_give_the_same_bits():
    model = _model()
    for name in ("up", "down", "special"):
        model[name].to(torch.bfloat16)
    x = torch.randn(7, 48).to(torch.bfloat16)
    before = {"up": model["up"](x), "down": model["down"](model["up"](x)), "fp32": model["fp32"](x.float())}
    assert pack_linears(model) == 2
    assert type(model["up"]) is PackedLinear and type(model["down"]) is PackedLinear
    assert type(model["special"]) is _Special and type(model["fp32"]) is nn.Linear
    assert torch.equal(model["up"](x), before["up"])
    assert torch.equal(model["down"](model["up"](x)), before["down"])
    assert torch.equal(model["fp32"](x.float()), before["fp32"])
    x3 = x.view(1, 7, 48).expand(2, 7, 48)  # any leading shape, as nn.Linear takes
    assert torch.equal(model["up"](x3), before["up"].expand(2, 7, 96))


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_the_gelu_epilogue_rounds_once_from_the_float32_result(approximate):
    """gelu of the float32 accumulator, rounded once: within half a bf16 step of the float32 GELU of the
    same bf16 operands, and nearer to it on average than the product rounded, then activated."""
    model = _model()
    up = model["up"].to(torch.bfloat16)
    x = torch.randn(64, 48).bfloat16()
    exact = nn.functional.gelu(nn.functional.linear(x.float(), up.weight.float(), up.bias.float()),
                               approximate=approximate)
    two_passes = nn.functional.gelu(up(x), approximate=approximate).float()
    pack_linears(model)
    fused = up.gelu(x, approximate).float()
    assert ((fused - exact).abs() <= exact.abs() * 2**-8 + 1e-6).all()
    assert (fused - exact).abs().mean() < (two_passes - exact).abs().mean()


@pytest.mark.slow  # loads the default model twice
def test_a_bf16_engine_on_the_cpu_packs_its_linears_and_gives_the_unpacked_vectors(monkeypatch):
    from rose_embed.engine.contract.config import EngineConfig
    from rose_embed.engine.rose import engine as engine_module
    from tests.conftest import load_texts

    texts = load_texts(40)
    packed = engine_module.Engine(EngineConfig(device="cpu", dtype="bfloat16"))
    assert any(isinstance(m, PackedLinear) for m in packed.runner.model.modules())
    monkeypatch.setattr(engine_module, "pack_linears", lambda model: 0)
    plain = engine_module.Engine(EngineConfig(device="cpu", dtype="bfloat16"))
    assert not any(isinstance(m, PackedLinear) for m in plain.runner.model.modules())
    ours, theirs = packed.embed(texts), plain.embed(texts)
    # The products are the same bits; the up projection's GELU rounds once instead of twice.
    assert ((ours * theirs).sum(axis=1) >= 0.9999).all()
