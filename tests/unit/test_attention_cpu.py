"""The grouped CPU attention equals one exact SDPA call per sequence."""

from __future__ import annotations

import pytest
import torch

from rose_embed.engine.rose.attention.ragged import AttentionShape, SDPAPerSequenceBackend
from rose_embed.engine.rose.attention.cpu import GroupedSDPABackend


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


def _naive(q, k, v, cu, shape: AttentionShape, local: bool, table):
    """Scores, mask and softmax written out for each sequence: the definition of a window
    (inclusive bounds, key - query in [-left, right]) and of the bias (table column R + key - query)."""
    out = torch.empty_like(q)
    group = shape.num_heads // shape.num_kv_heads
    for start, end in zip(cu[:-1], cu[1:]):
        n = end - start
        qs, ks, vs = q[start:end], k[start:end].repeat_interleave(group, 1), v[start:end].repeat_interleave(group, 1)
        scores = torch.einsum("ihd,jhd->hij", qs, ks) * shape.scale
        offset = torch.arange(n)[None, :] - torch.arange(n)[:, None]
        if table is not None:
            radius = (table.shape[1] - 1) // 2
            scores = scores + table[:, offset + radius]
        allowed = torch.ones(n, n, dtype=torch.bool)
        if shape.is_causal:
            allowed &= offset <= 0
        if local:
            allowed &= (offset >= -shape.window[0]) & (offset <= shape.window[1])
        scores = scores.masked_fill(~allowed, float("-inf"))
        out[start:end] = torch.einsum("hij,jhd->ihd", scores.softmax(-1), vs)
    return out


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("local", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
def test_windows_and_position_bias_match_their_definition(is_causal, local, with_bias):
    torch.manual_seed(1)
    lengths = [1, 5, 9, 9, 30, 31, 64, 3]
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    shape = AttentionShape(num_heads=4, num_kv_heads=2, head_dim=8, is_causal=is_causal, softmax_scale=0.3,
                           window=(3, 5), has_position_bias=with_bias)
    q, k, v = torch.randn(cu[-1], 4, 8), torch.randn(cu[-1], 2, 8), torch.randn(cu[-1], 2, 8)
    table = torch.randn(4, 2 * 70 + 1) if with_bias else None
    want = _naive(q, k, v, cu, shape, local, table)
    cu_t = torch.tensor(cu, dtype=torch.int32)
    for backend in (GroupedSDPABackend(shape), SDPAPerSequenceBackend(shape)):
        meta = backend.prepare(cu_t, cu, max(lengths))
        for _ in range(2):  # the second layer reuses what the first built
            got = backend.forward(q, k, v, meta, local=local, position_bias=table)
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_a_window_no_sequence_can_outgrow_is_dropped():
    shape = AttentionShape(4, 4, 8, is_causal=False, window=(64, 64))
    assert shape.bounded_by(65).window is None and shape.bounded_by(66).window == (64, 64)
    causal = AttentionShape(4, 4, 8, is_causal=True, window=(4095, 0))
    assert causal.bounded_by(4096).window is None and causal.bounded_by(4097).window == (4095, 0)
