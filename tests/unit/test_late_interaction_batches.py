"""Late-interaction groups (a ColBERT model's rerank: a query, then the documents scored against it) in
packed batches, pieces and the queue: the query's QUERY_TOKEN marks survive packing, slicing and joining;
a batch of groups is cut between groups only, within its token and sequence caps; the queue never puts a
model's groups and its texts in one batch, and never cuts a group; a request's documents are laid out
in groups within the batch budget, each led by the query."""

from __future__ import annotations

import numpy as np

from rose_embed.engine.contract.batch import QUERY_TOKEN, join_packed, pack, slice_packed, split_packed
from rose_embed.engine.contract.messages import Piece
from rose_embed.engine.queue.piece_queue import PieceQueue, QueuedPiece
from rose_embed.engine.text.colbert_groups import rerank_groups


def _group(query_len: int, doc_lens: list[int], skip_first: bool = False):
    """(seqs, segments) of one group: the query, then documents whose kept tokens pool into one row each."""
    seqs = [np.full(query_len, 7, np.int32)] + [np.arange(n, dtype=np.int32) + 10 for n in doc_lens]
    segments = [np.full(query_len, QUERY_TOKEN, np.int32)]
    for n in doc_lens:
        ids = np.zeros(n, np.int32)
        if skip_first:
            ids[0] = -1  # a skiplist token: in no row
        segments.append(ids)
    return seqs, segments


def _groups(*groups):
    seqs, segments = [], []
    for query_len, doc_lens in groups:
        s, g = _group(query_len, doc_lens)
        seqs += s
        segments += g
    return seqs, segments


def test_packing_keeps_query_marks_and_gives_one_row_per_document():
    seqs, segments = _group(4, [3, 5], skip_first=True)
    batch = pack(seqs, segments)
    assert batch.is_late_interaction and batch.num_outputs == 2
    assert batch.segment_ids.tolist() == [QUERY_TOKEN] * 4 + [-1, 0, 0] + [-1, 1, 1, 1, 1]
    assert batch.cu_segments.tolist() == [0, 0, 1, 2]
    assert not pack(seqs[1:], segments[1:]).is_late_interaction  # documents alone: no query leads


def test_a_batch_of_groups_is_cut_between_groups_only():
    batch = pack(*_groups((4, [3, 5]), (4, [6]), (4, [2, 2, 2]), (4, [9])))
    assert batch.group_starts().tolist() == [0, 3, 5, 9]
    pieces = split_packed(batch, max_tokens=14, max_outputs=8)
    for piece in pieces:
        assert piece.is_late_interaction  # each opens with its query
        assert piece.num_tokens <= 14 and piece.num_seqs <= 8
    assert [p.num_seqs for p in pieces] == [3, 2, 4, 2]
    rejoined = join_packed(*pieces)
    for name in ("input_ids", "segment_ids", "cu_seqlens", "cu_segments"):
        np.testing.assert_array_equal(getattr(rejoined, name), getattr(batch, name))
    # Sequences count against the cap (a group holds one more than its rows): two groups of 3 and 2.
    assert [p.num_seqs for p in split_packed(batch, max_tokens=1000, max_outputs=5)] == [5, 4, 2]


def test_slicing_a_group_out_renumbers_its_rows_and_keeps_its_query():
    batch = pack(*_groups((4, [3, 5]), (4, [6, 1])))
    second = slice_packed(batch, 3, 6)
    assert second.segment_ids.tolist() == [QUERY_TOKEN] * 4 + [0] * 6 + [1]
    assert second.cu_segments.tolist() == [0, 0, 1, 2]


def _queued(batch, request: int, model: int = 0) -> QueuedPiece:
    message = Piece(request, 0, 0, batch.num_tokens, batch.num_seqs, batch.max_seqlen, batch.num_outputs,
                    batch.cu_segments is not None, True, model)
    return QueuedPiece("front end", message, batch)


def test_the_queue_keeps_groups_whole_and_apart_from_texts():
    groups = pack(*_groups((4, [3, 5]), (4, [6]), (4, [2, 2, 2])))  # 35 tokens
    texts = pack([np.arange(5, dtype=np.int32)] * 3, [np.arange(5, dtype=np.int32)] * 3)  # one row per token
    queue = PieceQueue(max_batch_tokens=30, max_batch_seqs=64, scheduling="fcfs")
    queue.offer(_queued(groups, 1))
    queue.offer(_queued(texts, 2))
    cuts = []
    while (batch := queue.cut()) is not None:
        assert len({s.piece.batch.is_late_interaction for s in batch.slices}) == 1  # never both
        if batch.packed.is_late_interaction:
            assert all(s.lo in (0, 3, 5) and s.hi in (3, 5, 9) for s in batch.slices)
        cuts.append((batch.packed.is_late_interaction, batch.packed.num_seqs, batch.packed.num_outputs))
    # 12 + 10 tokens, then 10 (the texts would fill the rest of either, were they of the same class), then the texts
    assert cuts == [(True, 5, 3), (True, 4, 3), (False, 3, 15)]


def test_documents_are_laid_out_in_groups_within_the_budget():
    query = np.full(5, 1, np.int32)
    documents = [np.full(n, 2, np.int32) for n in (4, 6, 3, 8, 2)]
    kept = [np.where(np.arange(len(d)) == 1, -1, np.arange(len(d))).astype(np.int32) for d in documents]
    seqs, segments = rerank_groups(query, documents, kept, max_tokens=16, max_seqs=3)
    assert [len(s) for s in seqs] == [5, 4, 6, 5, 3, 8, 5, 2]  # the query leads every group
    assert segments[0].tolist() == [QUERY_TOKEN] * 5
    assert segments[1].tolist() == [0, -1, 0, 0]  # every kept token in the document's one row
    batch = pack(seqs, segments)
    assert batch.num_outputs == len(documents) and batch.group_starts().tolist() == [0, 3, 6]
    # A document longer than the budget beside the query still goes, alone with it.
    seqs, _ = rerank_groups(query, [np.ones(30, np.int32)], [np.zeros(30, np.int32)], max_tokens=16, max_seqs=3)
    assert [len(s) for s in seqs] == [5, 30]
