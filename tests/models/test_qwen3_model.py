"""The Qwen3 layers on a packed stream against transformers' Qwen3Model, in process (no server).

fp32 on CPU; tolerance 1e-4 absolute on hidden states of magnitude ~1 (the two differ
only in summation order). Packing several sequences into one stream must give each the
hidden states it gets alone, under both attention masks.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rose_embed.engine.contract.batch import pack
from rose_embed.engine.rose.attention.ragged import SDPAPerSequenceBackend
from rose_embed.engine.rose.layers.rotary import rope_theta
from rose_embed.engine.rose.models.qwen3 import Qwen3Model
from tests.support.qwen3_checkpoints import randomize

ATOL = 1e-4


def _models(**extra):
    from transformers import Qwen3Config  # seconds to import: not while the tests are collected
    from transformers import Qwen3Model as HFQwen3Model

    shape = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, max_position_embeddings=128, rope_theta=1234.0)
    config = Qwen3Config(**{**shape, **extra})
    hf = HFQwen3Model(config).eval()
    randomize(hf, seed=7)
    ours = Qwen3Model(config.to_dict())
    ours.load_hf_weights(hf.state_dict())
    return hf, ours.eval()


@pytest.mark.parametrize("is_causal", [True, False])
@pytest.mark.parametrize("attention_bias", [False, True])
@torch.no_grad()
def test_packed_stream_matches_transformers(is_causal, attention_bias):
    hf, ours = _models(attention_bias=attention_bias)
    rng = np.random.default_rng(0)
    seqs = [rng.integers(0, 97, n).astype(np.int32) for n in (1, 7, 33, 128, 2)]
    batch = pack(seqs)
    attention = SDPAPerSequenceBackend(ours.attention_shape(is_causal))
    meta = attention.prepare(torch.from_numpy(batch.cu_seqlens), batch.cu_seqlens.tolist(), batch.max_seqlen)
    hidden = ours(torch.from_numpy(batch.input_ids), torch.from_numpy(batch.positions), attention, meta)
    for i, seq in enumerate(seqs):
        mask = None if is_causal else torch.zeros(1, 1, len(seq), len(seq))
        ref = hf(input_ids=torch.from_numpy(seq).long()[None], attention_mask=mask).last_hidden_state[0]
        torch.testing.assert_close(hidden[batch.cu_seqlens[i]:batch.cu_seqlens[i + 1]], ref, atol=ATOL, rtol=0)


@torch.no_grad()
def test_prefixed_and_bare_names_load_alike():
    hf, ours = _models()
    prefixed = Qwen3Model(hf.config.to_dict())
    state = {f"model.{k}": v.to(torch.bfloat16) for k, v in hf.state_dict().items()}
    state["lm_head.weight"] = state["model.embed_tokens.weight"]
    prefixed.load_hf_weights(state)
    for (name, a), (_, b) in zip(ours.state_dict().items(), prefixed.state_dict().items()):
        torch.testing.assert_close(a.to(torch.bfloat16).float(), b, atol=0, rtol=0, msg=name)


def test_unknown_tensors_are_refused():
    hf, ours = _models()
    state = dict(hf.state_dict(), **{"layers.0.self_attn.extra.weight": torch.zeros(1)})
    with pytest.raises(ValueError, match="unexpected Qwen3 tensors"):
        ours.load_hf_weights(state)


def test_rope_theta_from_either_config_generation():
    assert rope_theta({"rope_theta": 1e6}) == 1e6
    assert rope_theta({"rope_parameters": {"rope_type": "default", "rope_theta": 5e5}}) == 5e5
    with pytest.raises(ValueError, match="yarn"):
        rope_theta({"rope_theta": 1e6, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})
