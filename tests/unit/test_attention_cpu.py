"""The grouped CPU attention equals one exact SDPA call per sequence."""

from __future__ import annotations

import numpy as np
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


def _naive(q, k, v, cu, shape: AttentionShape, local: bool, table, num_keys=None):
    """Scores, mask and softmax written out for each sequence: the definition of a window
    (inclusive bounds, key - query in [-left, right]), of the bias (table column R + key - query)
    and of hidden keys (a sequence's queries see its first num_keys[b] tokens only)."""
    out = torch.empty_like(q)
    group = shape.num_heads // shape.num_kv_heads
    for b, (start, end) in enumerate(zip(cu[:-1], cu[1:])):
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
        if num_keys is not None:
            allowed &= torch.arange(n)[None, :] < int(num_keys[b])
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


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("local", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
def test_hidden_keys_are_seen_by_no_query_while_their_rows_stay_queries(is_causal, local, with_bias):
    # Sequences whose last tokens are no keys (a ColBERT query's [MASK]s, engine/contract/hidden_keys.py)
    # beside sequences that hide nothing, grouped together and alone; one hides all but its first token.
    torch.manual_seed(2)
    lengths = [12, 12, 5, 9, 12, 30, 1, 12, 64, 7]
    num_keys = np.array([5, 12, 5, 3, 1, 30, 1, 11, 40, 7], dtype=np.int32)
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    # The window reaches back to a key from every hidden row, as the engine requires (engine/rose/engine.py).
    shape = AttentionShape(num_heads=4, num_kv_heads=2, head_dim=8, is_causal=is_causal, window=(30, 30),
                           has_position_bias=with_bias)
    q, k, v = torch.randn(cu[-1], 4, 8), torch.randn(cu[-1], 2, 8), torch.randn(cu[-1], 2, 8)
    table = torch.randn(4, 2 * 70 + 1) if with_bias else None
    want = _naive(q, k, v, cu, shape, local, table, num_keys)
    assert not torch.allclose(want, _naive(q, k, v, cu, shape, local, table))  # hiding changes the answer
    cu_t = torch.tensor(cu, dtype=torch.int32)
    for backend in (GroupedSDPABackend(shape), SDPAPerSequenceBackend(shape)):
        assert backend.takes_num_keys
        meta = backend.prepare(cu_t, cu, max(lengths), num_keys=num_keys)
        for _ in range(2):
            got = backend.forward(q, k, v, meta, local=local, position_bias=table)
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
