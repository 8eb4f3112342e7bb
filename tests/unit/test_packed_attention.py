"""The packed-tile attention kernel against its definition, on the CPU through Triton's interpreter.

Reference: scores, mask and softmax written out per sequence (tests/unit/test_attention_cpu.py's
_naive), which the per-sequence SDPA backend also matches. Shapes are tiny (the interpreter
runs every program in numpy) but cut so that tiles hold several short sequences, the end of
one and the start of the next, and pieces of a long one; the padding a graph adds (dummy
segments, empty segments) is there too. fp32 and fp16 here: the interpreter's bf16 dot is
not faithful, so bf16 is checked on the GPU (tests/gpu/test_packed_attention_gpu.py).
"""

from __future__ import annotations

import pytest
import torch

from rose_embed.engine.rose.attention.ragged import AttentionShape
from tests.unit.test_attention_cpu import _naive
from tests.support.triton_interpreter import SKIP_REASON, use_interpreter

_INTERPRETED = use_interpreter()
pytest.importorskip("triton")
pytestmark = pytest.mark.skipif(not _INTERPRETED, reason=SKIP_REASON)

LENGTHS = [1, 3, 5, 2, 17, 9, 70, 4, 4, 1, 33]  # 149 tokens


@pytest.fixture(scope="module")
def kernel():
    from rose_embed.engine.rose.attention import packed as packed_attention

    return packed_attention


def _cu(lengths: list[int]) -> list[int]:
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    return cu


def _inputs(num_tokens: int, num_heads: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype, seed: int = 0):
    """Inputs rounded to `dtype` first: the kernel is checked, not the rounding of its inputs."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(num_tokens, heads, head_dim, generator=g).to(dtype).float()
            for heads in (num_heads, num_kv_heads, num_kv_heads)]


def test_sequence_bounds_skip_empty_segments(kernel):
    # Two real sequences, a dummy one, then the empty segments that round the count up.
    cu = torch.tensor([0, 2, 5, 8, 8, 8], dtype=torch.int32)
    start, end = kernel.sequence_bounds(cu, 8)
    assert start.tolist() == [0, 0, 2, 2, 2, 5, 5, 5]
    assert end.tolist() == [2, 2, 5, 5, 5, 8, 8, 8]
    assert start.dtype == end.dtype == torch.int32


@pytest.mark.parametrize("mask_inner_blocks,share_kv_heads,fold_scale",
                         [(True, False, False), (False, False, False), (True, True, False), (False, True, True)],
                         ids=["mask-every-block", "skip-inner-masks", "kv-heads-shared", "all-options"])
@pytest.mark.parametrize("is_causal", [False, True], ids=["bidirectional", "causal"])
@pytest.mark.parametrize("num_kv_heads", [2, 1], ids=["mha", "gqa"])
def test_matches_the_definition_with_small_tiles(kernel, is_causal, num_kv_heads, mask_inner_blocks,
                                                  share_kv_heads, fold_scale):
    """Tiles of 16 rows: most hold several sequences, and the 70-token one spans five (and with
    16-key blocks, its middle tiles see key blocks inside it, which may skip the mask)."""
    from rose_embed.engine.rose.attention.cuda import PackedAttentionBackend

    cu = _cu(LENGTHS)
    shape = AttentionShape(2, num_kv_heads, 32, is_causal)
    q, k, v = _inputs(cu[-1], 2, num_kv_heads, 32, torch.float32)
    want = _naive(q, k, v, cu, shape, False, None)
    tiles = kernel.Tiles(16, 16, mask_inner_blocks=mask_inner_blocks, share_kv_heads=share_kv_heads,
                         fold_scale=fold_scale)
    backend = PackedAttentionBackend(shape, tiles=tiles)
    # As a graph lays the batch out: the real sequences, then empty segments.
    cu_padded = torch.tensor(cu + [cu[-1]] * 5, dtype=torch.int32)
    meta = backend.prepare(cu_padded, cu_padded.tolist(), max(LENGTHS))
    got = backend.forward(q, k, v, meta)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=2e-5)
    assert meta.bounds(cu[-1]) is meta.bounds(cu[-1])  # made once per batch, for every layer


@pytest.mark.parametrize("dtype,head_dim,is_causal", [(torch.float32, 24, False), (torch.float16, 64, True),
                                                      (torch.float16, 128, True)])
def test_default_tiles_other_head_dims_and_fp16(kernel, dtype, head_dim, is_causal):
    """The launcher's own tile sizes (at head_dim 128, with the GQA group of two, the stacked
    heads); a head_dim that is not a power of two is padded and masked."""
    lengths = [3] * 30 + [100]  # 30 short sequences in the first tile, then a long one
    cu = _cu(lengths)
    shape = AttentionShape(2, 1, head_dim, is_causal)
    q, k, v = _inputs(cu[-1], 2, 1, head_dim, dtype, seed=head_dim)
    want = _naive(q, k, v, cu, shape, False, None)
    start, end = kernel.sequence_bounds(torch.tensor(cu, dtype=torch.int32), cu[-1])
    got = kernel.packed_attention(*(x.to(dtype) for x in (q, k, v)), start, end, shape.scale, is_causal)
    assert got.dtype == dtype
    tolerance = 2e-5 if dtype == torch.float32 else 2e-3
    torch.testing.assert_close(got.float(), want, atol=tolerance, rtol=tolerance)


@pytest.mark.parametrize("fold_scale", [False, True], ids=["scaled", "scale-folded"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
def test_online_softmax_follows_maxima_that_grow_and_shrink(kernel, dtype, fold_scale):
    """Keys whose scores rise by tens of log2 units block after block (and fall again), so
    that the running maxima move on some blocks and not on others; with a mixed causal batch,
    rows meet their first allowed key on different blocks."""
    lengths = [90, 5, 40]
    cu = _cu(lengths)
    shape = AttentionShape(2, 1, 16, True)
    q, k, v = _inputs(cu[-1], 2, 1, 16, torch.float32, seed=7)
    # Key norms from 0.2 up to 12 and back: scores spread over tens of log2 units.
    ramp = torch.cat([torch.linspace(0.2, 12.0, 60), torch.linspace(12.0, 0.5, cu[-1] - 60)])
    k = (k * ramp[:, None, None]).to(dtype).float()
    want = _naive(q, k, v, cu, shape, False, None)
    start, end = kernel.sequence_bounds(torch.tensor(cu, dtype=torch.int32), cu[-1])
    got = kernel.packed_attention(*(x.to(dtype) for x in (q, k, v)), start, end, shape.scale, True,
                                  kernel.Tiles(16, 16, fold_scale=fold_scale))
    tolerance = 2e-5 if dtype == torch.float32 else 1e-2  # fp16: p rounded before p @ v, on scores this spread
    torch.testing.assert_close(got.float(), want, atol=tolerance, rtol=tolerance)


def test_strided_views_of_a_fused_projection(kernel):
    """q, k and v as the models hand them over: views into one [T, 3, H, D] projection."""
    cu = _cu([7, 20, 2])
    shape = AttentionShape(2, 2, 16, False)
    qkv = torch.randn(cu[-1], 3, 2, 16, generator=torch.Generator().manual_seed(3))
    q, k, v = qkv.unbind(1)
    want = _naive(q.contiguous(), k.contiguous(), v.contiguous(), cu, shape, False, None)
    start, end = kernel.sequence_bounds(torch.tensor(cu, dtype=torch.int32), cu[-1])
    got = kernel.packed_attention(q, k, v, start, end, shape.scale, False, kernel.Tiles(16, 16))
    torch.testing.assert_close(got, want, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("shape", [AttentionShape(4, 4, 32, False, window=(8, 8)),
                                   AttentionShape(4, 4, 32, False, has_position_bias=True)],
                         ids=["window", "position_bias"])
def test_refuses_windows_and_position_bias(kernel, shape):
    from rose_embed.engine.rose.attention.cuda import PackedAttentionBackend

    with pytest.raises(ValueError, match="varlen"):
        PackedAttentionBackend(shape)


def test_one_token_and_one_sequence_batches(kernel):
    """A lone one-token query (an eager run) and one sequence that fills several tiles."""
    for lengths in ([1], [150]):
        cu = _cu(lengths)
        shape = AttentionShape(2, 1, 16, True)
        q, k, v = _inputs(cu[-1], 2, 1, 16, torch.float32, seed=len(lengths))
        start, end = kernel.sequence_bounds(torch.tensor(cu, dtype=torch.int32), cu[-1])
        got = kernel.packed_attention(q, k, v, start, end, shape.scale, True, kernel.Tiles(64, 32))
        torch.testing.assert_close(got, _naive(q, k, v, cu, shape, False, None), atol=2e-5, rtol=2e-5)
