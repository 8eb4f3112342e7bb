"""The BERT family's up projection and GELU (engine/rose/layers/fused.py linear_gelu) on the CPU:
the definition itself, whatever the GELU-epilogue switch says (the switch concerns CUDA only;
tests/gpu/test_fused_gpu.py covers it there), and a hidden_act the engine does not compute refused by name."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from rose_embed.engine.rose.layers import fused
from rose_embed.engine.rose.models import MODEL_CLASSES


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("epilogue", [False, True])
def test_the_cpu_computes_the_definition(approximate, epilogue):
    g = torch.Generator().manual_seed(0)
    x, weight, bias = torch.randn(37, 64, generator=g), torch.randn(256, 64, generator=g), torch.randn(256, generator=g)
    with fused.gelu_epilogue(epilogue):
        got = fused.linear_gelu(x, weight, bias, approximate)
    assert torch.equal(got, F.gelu(F.linear(x, weight, bias), approximate=approximate))


@pytest.mark.parametrize("hidden_act,approximate", [("gelu", "none"), ("gelu_new", "tanh"), ("relu", None)])
def test_a_bert_layer_applies_its_checkpoints_activation(hidden_act, approximate):
    config = dict(vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                  max_position_embeddings=16, hidden_act=hidden_act)
    layer = MODEL_CLASSES["bert"](config).layers[0]
    x = torch.randn(5, 32)
    up = F.linear(x, layer.up_proj.weight, layer.up_proj.bias)
    want = F.relu(up) if approximate is None else F.gelu(up, approximate=approximate)
    assert torch.equal(layer._up(x), want)


def test_an_activation_the_engine_does_not_compute_is_refused_by_name():
    config = dict(vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                  max_position_embeddings=16, model_type="bert", hidden_act="gelu_fast")
    with pytest.raises(ValueError, match="bert with hidden_act 'gelu_fast' is not supported"):
        MODEL_CLASSES["bert"](config)
