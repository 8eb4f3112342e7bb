"""The pieces of late chunking, each against a computation written here: windows cut at chunk
boundaries (engine/text/late_chunking.py), batches that pool several vectors per sequence
(engine/contract/batch.py), and pooling by segment (engine/rose/layers/pooling.py), whose ordinary case must
equal pooling by sequence bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rose_embed.engine.contract.batch import batch_ranges, join_packed, pack, slice_packed, split_packed
from rose_embed.engine.text.late_chunking import ChunkTooLongError, EmptyChunkError, LateChunkedDocuments, document_windows, \
    fit_documents, late_chunking_problem
from rose_embed.engine.rose.layers.pooling import pool, pool_segments
from rose_embed.engine.text.long_inputs import CannotWindowError, combine_windows
from tests.support.fake_engine import FakeEngine

CLS, SEP = 101, 102


def _windows(chunks, max_seq_len=10, max_chunks=100, mode="truncate"):
    got = document_windows(chunks, (CLS,), (SEP,), max_seq_len, max_chunks, mode)
    return [(w.ids.tolist(), w.segment_ids.tolist(), parts) for w, parts in got]


# ---- windows ---------------------------------------------------------------------------------------


def test_a_document_that_fits_is_one_window_of_its_chunks_between_the_special_tokens():
    [(ids, segments, parts)] = _windows([[1, 2, 3], [4, 5], [6]])
    assert ids == [CLS, 1, 2, 3, 4, 5, 6, SEP]
    assert segments == [-1, 0, 0, 0, 1, 1, 2, -1]  # the special tokens are in no chunk's mean
    assert parts == [(0, 3), (1, 2), (2, 1)]


def test_a_longer_document_is_cut_at_chunk_boundaries_greedily():
    # room for 8 tokens between [CLS] and [SEP]
    got = _windows([[1, 2, 3], [4, 5, 6], [7, 8], [9, 10, 11], [12]])
    assert [ids for ids, _, _ in got] == [[CLS, 1, 2, 3, 4, 5, 6, 7, 8, SEP], [CLS, 9, 10, 11, 12, SEP]]
    assert [segments for _, segments, _ in got] == [[-1, 0, 0, 0, 1, 1, 1, 2, 2, -1], [-1, 0, 0, 0, 1, -1]]
    assert [parts for _, _, parts in got] == [[(0, 3), (1, 3), (2, 2)], [(3, 3), (4, 1)]]
    assert all(len(ids) <= 10 for ids, _, _ in got)


def test_a_window_holds_at_most_max_chunks_segments():
    got = _windows([[i] for i in range(1, 8)], max_chunks=3)
    assert [parts for _, _, parts in got] == [[(0, 1), (1, 1), (2, 1)], [(3, 1), (4, 1), (5, 1)], [(6, 1)]]


def test_a_chunk_past_a_window_is_truncated_cut_or_refused():
    chunks = [[1], list(range(20, 31)), [2]]  # 11 tokens, room 8
    truncated = _windows(chunks)
    assert [parts for _, _, parts in truncated] == [[(0, 1)], [(1, 8)], [(2, 1)]]
    assert truncated[1][0] == [CLS, *range(20, 28), SEP]
    cut = _windows(chunks, mode="chunk")  # the long chunk fills the first window's room, then the next
    assert [parts for _, _, parts in cut] == [[(0, 1), (1, 7)], [(1, 4), (2, 1)]]
    assert [ids for ids, _, _ in cut] == [[CLS, 1, *range(20, 27), SEP], [CLS, 27, 28, 29, 30, 2, SEP]]
    assert [segments for _, segments, _ in cut] == [[-1, 0] + [1] * 7 + [-1], [-1, 0, 0, 0, 0, 1, -1]]
    longer = _windows([[1], list(range(20, 40)), [2]], mode="chunk")  # 20 tokens: 7, 8, then 5 beside [2]
    assert [parts for _, _, parts in longer] == [[(0, 1), (1, 7)], [(1, 8)], [(1, 5), (2, 1)]]
    with pytest.raises(ChunkTooLongError) as info:
        document_windows(chunks, (CLS,), (SEP,), 10, 100, "error", document=4)
    assert (info.value.document, info.value.chunk, info.value.num_tokens, info.value.max_seq_len) == (4, 1, 13, 10)
    with pytest.raises(CannotWindowError, match="leave no room"):
        document_windows(chunks, (CLS, 7), (SEP,), 3, 100, "truncate")


def test_combine_gives_a_cut_chunk_the_token_weighted_mean_of_its_parts():
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((4, 6)).astype(np.float32)
    fitted = LateChunkedDocuments(windows=[], num_chunks=[2, 1], chunk_of=np.array([0, 1, 1, 2]),
                                  weights=np.array([3, 8, 2, 5]))
    out = fitted.combine(vectors, normalize=True)
    assert out.shape == (3, 6)
    assert (out[0] == vectors[0]).all() and (out[2] == vectors[3]).all()
    np.testing.assert_allclose(out[1], combine_windows(vectors[1:3], [8, 2], True), rtol=0, atol=0)
    whole = LateChunkedDocuments(windows=[], num_chunks=[2], chunk_of=np.array([0, 1]), weights=np.array([1, 1]))
    assert whole.combine(vectors[:2], True) is not None and (whole.combine(vectors[:2], True) == vectors[:2]).all()


def test_fit_documents_tokenizes_each_chunk_alone_with_the_prompt_after_cls():
    fake = FakeEngine()
    tokenizer = fake.tokenizer
    documents = [["The first chunk.", "And the second one"], ["only one"]]
    fitted = fit_documents(tokenizer, "truncate", documents, "query: ", max_chunks=512)
    prompt = tokenizer.encode_untruncated(["query: "], add_special_tokens=False)[0]
    chunks = [tokenizer.encode_untruncated([c], add_special_tokens=False)[0] for d in documents for c in d]
    assert [w.ids.tolist() for w in fitted.windows] == [
        [CLS, *prompt, *chunks[0], *chunks[1], SEP], [CLS, *prompt, *chunks[2], SEP]]
    assert fitted.windows[0].segment_ids.tolist() == [-1] * (1 + len(prompt)) + [0] * len(chunks[0]) + \
        [1] * len(chunks[1]) + [-1]
    assert fitted.num_chunks == [2, 1] and fitted.chunk_of.tolist() == [0, 1, 2]
    assert fitted.num_tokens == sum(len(w.ids) for w in fitted.windows)
    with pytest.raises(EmptyChunkError) as info:
        fit_documents(tokenizer, "truncate", [["fine"], ["fine", "   "]], "", max_chunks=512)
    assert (info.value.document, info.value.chunk) == (1, 1)


def test_only_bidirectional_mean_pooling_models_can_late_chunk():
    from dataclasses import replace

    spec = FakeEngine().spec
    assert late_chunking_problem(spec) is None
    assert "causal" in late_chunking_problem(replace(spec, is_causal=True))
    for pooling in ("cls", "last", "max", "mean+max", "weighted_mean"):
        assert "pooling" in late_chunking_problem(replace(spec, pooling=pooling))


# ---- batches of segments ---------------------------------------------------------------------------


def _segmented_batch():
    seqs = [np.arange(1, 6, dtype=np.int32), np.arange(10, 18, dtype=np.int32), np.arange(20, 23, dtype=np.int32)]
    segments = [None, np.array([-1, 0, 0, 1, 1, 1, 2, -1], np.int32), None]
    return seqs, segments, pack(seqs, segments)


def test_pack_numbers_the_segments_across_the_batch():
    seqs, segments, batch = _segmented_batch()
    assert batch.num_seqs == 3 and batch.num_outputs == 5
    assert batch.cu_segments.tolist() == [0, 1, 4, 5]
    assert batch.segment_ids.tolist() == [0] * 5 + [-1, 1, 1, 2, 2, 2, 3, -1] + [4] * 3
    ordinary = pack(seqs)
    assert ordinary.segment_ids is None and ordinary.num_outputs == 3
    assert ordinary.pooling_ids().tolist() == [0] * 5 + [1] * 8 + [2] * 3
    assert pack(seqs, [None, None, None]).segment_ids is None


def test_slices_joins_and_splits_keep_each_token_in_its_segment():
    _, _, batch = _segmented_batch()
    second = slice_packed(batch, 1, 3)
    assert second.cu_segments.tolist() == [0, 3, 4] and second.num_outputs == 4
    assert second.segment_ids.tolist() == [-1, 0, 0, 1, 1, 1, 2, -1, 3, 3, 3]
    rejoined = join_packed(slice_packed(batch, 0, 1), second)
    for name in ("input_ids", "positions", "cu_seqlens", "segment_ids", "cu_segments"):
        assert getattr(rejoined, name).tolist() == getattr(batch, name).tolist(), name
    pieces = split_packed(batch, 8)
    assert [p.num_seqs for p in pieces] == [1, 1, 1] and sum(p.num_outputs for p in pieces) == 5
    offsets = np.cumsum([0] + [p.num_outputs for p in pieces])
    glued = np.concatenate([np.where(p.pooling_ids() < 0, -1, p.pooling_ids() + o) for p, o in zip(pieces, offsets)])
    assert glued.tolist() == batch.segment_ids.tolist()


def test_batch_ranges_cap_the_vectors_a_batch_pools():
    cu_seqlens = np.array([0, 4, 8, 12, 16])
    assert batch_ranges(cu_seqlens, 100, 3) == [(0, 3), (3, 4)]
    cu_segments = np.array([0, 1, 3, 4, 5])  # the second sequence pools two vectors
    assert batch_ranges(cu_seqlens, 100, 3, cu_segments) == [(0, 2), (2, 4)]
    assert batch_ranges(cu_seqlens, 100, 1, cu_segments) == [(0, 1), (1, 2), (2, 3), (3, 4)]  # one alone past the cap


# ---- pooling ---------------------------------------------------------------------------------------


def _reference(hidden: np.ndarray, ids: np.ndarray, num_segments: int, mode: str) -> np.ndarray:
    out = np.zeros((num_segments, hidden.shape[1]))
    for s in range(num_segments):
        rows = hidden[ids == s]
        if not len(rows):
            continue
        n = len(rows)
        out[s] = {"mean": lambda: rows.mean(0), "cls": lambda: rows[0], "last": lambda: rows[-1],
                  "max": lambda: rows.max(0), "mean_sqrt_len": lambda: rows.sum(0) / np.sqrt(n),
                  "weighted_mean": lambda: (rows * np.arange(1, n + 1)[:, None]).sum(0) / (n * (n + 1) / 2)}[mode]()
    return out


@pytest.mark.parametrize("mode", ["mean", "cls", "last", "max", "mean_sqrt_len", "weighted_mean"])
def test_pooling_by_segment_leaves_out_tokens_of_no_segment(mode):
    _, _, batch = _segmented_batch()
    hidden = torch.randn(batch.num_tokens, 8, generator=torch.Generator().manual_seed(1))
    ids = torch.from_numpy(batch.segment_ids)
    got = pool_segments(hidden, ids, 8, mode).numpy()  # 3 more rows than segments: padding
    expected = _reference(hidden.double().numpy(), batch.segment_ids, batch.num_outputs, mode)
    np.testing.assert_allclose(got[:5], expected, rtol=1e-6, atol=1e-6)
    if mode not in ("cls", "last"):
        assert not got[5:].any()  # empty segments pool to zeros


def test_ordinary_batches_pool_bit_for_bit_as_pooling_by_sequence_did():
    """One segment per sequence: the scatter-add over the sequence index and the division by
    its length that pooling by sequence computed, to the last bit."""
    seqs, _, _ = _segmented_batch()
    batch = pack(seqs)
    hidden = torch.randn(batch.num_tokens, 8, generator=torch.Generator().manual_seed(2))
    cu = torch.from_numpy(batch.cu_seqlens).long()
    lengths = cu[1:] - cu[:-1]
    seq_index = torch.repeat_interleave(torch.arange(batch.num_seqs), lengths)
    mean = torch.zeros(batch.num_seqs, 8).index_add_(0, seq_index, hidden) / lengths.clamp(min=1).unsqueeze(1).float()
    ids = torch.from_numpy(batch.pooling_ids())
    assert torch.equal(pool_segments(hidden, ids, batch.num_seqs, "mean"), mean)
    assert torch.equal(pool_segments(hidden, ids, batch.num_seqs, "cls"), hidden[cu[:-1]])
    assert torch.equal(pool_segments(hidden, ids, batch.num_seqs, "last"), hidden[cu[1:] - 1])
    for mode in ("max", "mean_sqrt_len", "weighted_mean", "cls+mean"):  # the wrapper by sequence is the same code
        assert torch.equal(pool(hidden, torch.from_numpy(batch.cu_seqlens), mode),
                           pool_segments(hidden, ids, batch.num_seqs, mode))


# ---- the padded layout a CUDA graph runs, computed on the CPU -----------------------------------


def test_the_padded_graph_layout_pools_the_same_vectors_as_the_batch_alone():
    """What CUDAGraphRunner feeds a graph: the batch padded to its bucket by dummy sequences whose
    tokens pool into no segment, and more segment rows than vectors. The model and head run
    here eagerly on the CPU on those padded inputs; the rows for the batch's vectors must be
    what the unpadded batch gives."""
    from transformers import BertConfig, BertModel

    from rose_embed.engine.rose.graphs import CUDAGraphRunner, _fill_padded
    from rose_embed.engine.rose.attention.backends import make_attention_backend
    from rose_embed.engine.rose.layers.head import SentenceHead
    from rose_embed.engine.rose.models import MODEL_CLASSES
    from rose_embed.engine.rose.runner import ModelRunner

    torch.manual_seed(0)
    hf = BertModel(BertConfig(vocab_size=200, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                              intermediate_size=64, max_position_embeddings=256), add_pooling_layer=False)
    model = MODEL_CLASSES["bert"](hf.config.to_dict())
    model.load_hf_weights(hf.state_dict())
    model.eval()
    attention = make_attention_backend("sdpa", model.attention_shape(False), torch.device("cpu"))
    runner = ModelRunner(model, SentenceHead("mean"), attention, torch.device("cpu"), max_num_tokens=512,
                         max_num_seqs=64, max_seqlen=256)
    rng = np.random.default_rng(0)
    window = np.array([CLS, *rng.integers(5, 200, 60), SEP], np.int32)
    segments = np.array([-1] + [k for k in range(20) for _ in range(3)] + [-1], np.int32)  # 20 chunks of 3
    seqs = [rng.integers(5, 200, 7).astype(np.int32), window, rng.integers(5, 200, 30).astype(np.int32)]
    batch = pack(seqs, [None, segments, None])
    assert (batch.num_seqs, batch.num_outputs) == (3, 22)
    graphs = CUDAGraphRunner(None, attention, None, max_num_tokens=512, max_num_seqs=64, max_seqlen=256)
    bucket, num_segments, chunk = graphs.layout(batch.num_tokens, batch.num_seqs, batch.max_seqlen, batch.num_outputs)
    assert (bucket, num_segments) == (128, 32)  # 22 vectors need 32 rows though 3 sequences + 1 dummy would take 4
    ids, positions = np.zeros(bucket, np.int32), np.zeros(bucket, np.int32)
    cu, segment_ids = np.zeros(num_segments + 1, np.int32), np.zeros(bucket, np.int32)
    _fill_padded(batch, chunk, ids, positions, cu, segment_ids)
    with torch.inference_mode():
        meta = attention.prepare(torch.from_numpy(cu), cu.tolist(), chunk)
        padded = runner._forward(*(torch.from_numpy(a) for a in (ids, positions, cu, segment_ids)), num_segments, meta)
        alone = runner.execute(batch).wait()
    assert padded.shape == (num_segments, 32) and alone.shape == (22, 32)
    np.testing.assert_allclose(padded[:22].numpy(), alone, rtol=0, atol=1e-5)
    assert not padded[22:].any()  # no token pools into the padding rows
