"""The grouped CPU attention equals one exact SDPA call per sequence."""

from __future__ import annotations

import pytest
import torch

from engine.layers.attention import AttentionShape, SDPAPerSequenceBackend
from engine.layers.attention_cpu import GroupedSDPABackend


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("num_kv_heads", [4, 2])
def test_grouped_equals_per_sequence(is_causal, num_kv_heads):
    torch.manual_seed(0)
    lengths = [1, 3, 3, 4, 17, 18, 40, 2, 64, 5, 5, 5, 120]
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    shape = AttentionShape(num_heads=4, num_kv_heads=num_kv_heads, head_dim=16, is_causal=is_causal)
    q = torch.randn(cu[-1], 4, 16)
    k, v = torch.randn(cu[-1], num_kv_heads, 16), torch.randn(cu[-1], num_kv_heads, 16)
    cu_t = torch.tensor(cu, dtype=torch.int32)
    grouped, exact = GroupedSDPABackend(shape), SDPAPerSequenceBackend(shape)
    meta = grouped.prepare(cu_t, cu, max(lengths))
    assert 1 < len(meta) < len(lengths)  # really grouped, and not all into one padded block
    got = grouped.forward(q, k, v, meta)
    want = exact.forward(q, k, v, exact.prepare(cu_t, cu, max(lengths)))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
