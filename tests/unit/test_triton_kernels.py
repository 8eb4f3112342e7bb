"""Kernels of engine/rose/layers/triton_kernels.py against their references (engine/rose/layers/fused.py),
on the CPU through Triton's interpreter; tests/gpu/test_fused_gpu.py checks them compiled.

The pooling's segment sums take indices as the pooling hands them over
(engine/rose/layers/pooling.py): runs of tokens per segment, long ones across several tiles and
short ones several to a tile, padding segments with no token, and tokens no segment reads
(late chunking's special tokens) sent to one extra row; also indices in no order at all,
which the kernel must sum right too. The embeddings' kernel is checked in float32 and
float16 (the interpreter's bfloat16 arithmetic is numpy's float32 rounded, not the GPU's).
"""

from __future__ import annotations

import pytest
import torch

from tests.support.triton_interpreter import SKIP_REASON, use_interpreter

_INTERPRETED = use_interpreter()
pytest.importorskip("triton")
pytestmark = pytest.mark.skipif(not _INTERPRETED, reason=SKIP_REASON)


def _runs(lengths: list[int]) -> torch.Tensor:
    return torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))


def _reference(values: torch.Tensor, index: torch.Tensor, num_rows: int) -> torch.Tensor:
    return torch.zeros(num_rows, values.shape[1], dtype=torch.float64).index_add_(0, index, values.double())


def _check(values: torch.Tensor, index: torch.Tensor, num_rows: int) -> None:
    from rose_embed.engine.rose.layers.triton_kernels import segment_sums

    got = segment_sums(values, index, num_rows)
    assert got.dtype == torch.float32 and got.shape == (num_rows, values.shape[1])
    torch.testing.assert_close(got.double(), _reference(values, index, num_rows), rtol=1e-6, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["fp32", "bf16", "fp16"])
def test_documents_across_tiles(dtype):
    """Runs longer than a tile, ending mid-tile; 301 tokens (not a whole number of tiles) by 200
    columns (not a whole number of column blocks)."""
    lengths = [1, 3, 70, 150, 5, 64, 8]
    index = _runs(lengths)
    values = torch.randn(len(index), 200, generator=torch.Generator().manual_seed(0)).to(dtype)
    _check(values, index, len(lengths))


def test_short_texts_padding_segments_and_dropped_tokens():
    """Queries of 1-12 tokens, several to a tile; tokens no segment reads (index = the extra
    row) at the ends of some texts; padding segments that hold no token."""
    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(1, 13, (40,), generator=g).tolist()
    index = _runs(lengths)
    num_segments = len(lengths) + 3  # three padding segments
    dropped = torch.rand(len(index), generator=g) < 0.1
    index = torch.where(dropped, num_segments, index)
    values = torch.randn(len(index), 48, generator=g)
    _check(values, index, num_segments + 1)


def test_any_order_of_indices():
    g = torch.Generator().manual_seed(2)
    index = torch.randint(0, 9, (150,), generator=g)
    _check(torch.randn(150, 33, generator=g), index, 9)


def test_a_tile_that_starts_and_ends_in_one_segment_with_others_between():
    """Late chunking's layout: a text's special tokens (no segment reads them: the extra row)
    at both ends of a 64-token tile with its two chunks between, then a tile that starts and
    ends in the extra row with one chunk's run between."""
    extra = 4
    index = torch.tensor([extra] + [0] * 30 + [1] * 32 + [extra] + [extra] * 2 + [2] * 60 + [extra] * 2)
    _check(torch.randn(len(index), 40, generator=torch.Generator().manual_seed(5)), index, extra + 1)


def test_a_view_with_a_row_stride_and_one_column():
    """The hidden states as a view (row stride > columns), and the [T, 1] ones the lengths use."""
    g = torch.Generator().manual_seed(3)
    index = _runs([10, 90, 4])
    wide = torch.randn(len(index), 80, generator=g)
    _check(wide[:, 16:56], index, 3)
    _check(torch.ones(len(index), 1), index, 3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("token_type,offset", [(True, 0), (False, 2)], ids=["bert", "roberta-like"])
def test_embeddings_and_their_norm(dtype, token_type, offset):
    """word + position (+ the token-type row) then LayerNorm, as BertModel's embeddings: a hidden
    size that is not a power of two, positions from an offset (RoBERTa counts from 2)."""
    from rose_embed.engine.rose.layers import fused
    from rose_embed.engine.rose.layers.triton_kernels import embed_layer_norm

    g = torch.Generator().manual_seed(4)
    hidden, num_tokens = 200, 37
    word, position = (torch.randn(n, hidden, generator=g).to(dtype) for n in (50, 40))
    row = torch.randn(hidden, generator=g).to(dtype) if token_type else None
    weight, bias = (torch.randn(hidden, generator=g).to(dtype) for _ in range(2))
    ids = torch.randint(0, 50, (num_tokens,), generator=g)
    positions = torch.randint(0, 40 - offset, (num_tokens,), generator=g).to(torch.int32)
    got = embed_layer_norm(ids, positions, word, position, row, offset, weight, bias, 1e-12)
    want = fused.embed_layer_norm(ids, positions.long(), word, position, row, offset, weight, bias, 1e-12)  # the CPU's
    assert got.dtype == dtype and got.shape == (num_tokens, hidden)
    tolerance = 1e-5 if dtype == torch.float32 else 4e-3  # fp16: an ulp or two of the output
    torch.testing.assert_close(got.float(), want.float(), rtol=tolerance, atol=tolerance)


def test_add_layer_norm():
    """BERT's post-norm, whose LayerNorm the embeddings' kernel shares."""
    from rose_embed.engine.rose.layers import fused
    from rose_embed.engine.rose.layers.triton_kernels import add_layer_norm

    g = torch.Generator().manual_seed(5)
    x, residual = (torch.randn(23, 200, generator=g) for _ in range(2))
    weight, bias = (torch.randn(200, generator=g) for _ in range(2))
    torch.testing.assert_close(add_layer_norm(x, residual, weight, bias, 1e-12),
                               fused.add_layer_norm(x, residual, weight, bias, 1e-12), rtol=1e-5, atol=1e-5)


def _check_maxes(values: torch.Tensor, index: torch.Tensor, num_rows: int) -> None:
    from rose_embed.engine.rose.layers.triton_kernels import segment_maxes_into

    start = torch.rand(num_rows, values.shape[1], generator=torch.Generator().manual_seed(9)) * 0.5
    want = start.clone().scatter_reduce_(0, index[:, None].expand(-1, values.shape[1]), values.float(), "amax")
    got = segment_maxes_into(start.clone(), values, index)
    assert torch.equal(got, want.clamp_min(0)), (got - want).abs().max()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
def test_segment_maxes_of_documents_across_tiles(dtype):
    """SPLADE's max pooling: runs longer than a tile and ending mid-tile, negative values (the relu floors
    them at 0), maxes that start above 0 (a chunk pooled before), 200 columns; exactly scatter_reduce_'s."""
    lengths = [1, 3, 70, 150, 5, 64, 8]
    index = _runs(lengths)
    values = torch.randn(len(index), 200, generator=torch.Generator().manual_seed(2)).to(dtype)
    _check_maxes(values, index, len(lengths))


def test_segment_maxes_of_queries_dropped_tokens_and_indices_in_no_order():
    g = torch.Generator().manual_seed(3)
    lengths = torch.randint(1, 13, (40,), generator=g).tolist()
    index = _runs(lengths)
    num_segments = len(lengths) + 3
    index = torch.where(torch.rand(len(index), generator=g) < 0.1, num_segments, index)
    values = torch.randn(len(index), 48, generator=g)
    _check_maxes(values, index, num_segments + 1)
    shuffled = index[torch.randperm(len(index), generator=g)]
    _check_maxes(values, shuffled, num_segments + 1)
