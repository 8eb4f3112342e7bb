"""The engine's queue (engine/queue/piece_queue.py) and the arena's allocator (engine/arena.py), as
pure bookkeeping: first come first served, batches by token volume, admission, cancellation."""

from __future__ import annotations

import numpy as np

from engine.arena import Allocator, Arena, ArenaLayout
from engine.messages import Piece, decode_to_engine, encode
from engine.queue.piece_queue import PieceQueue, QueuedPiece
from engine.rose.batch import pack


def piece(front_end: str, request: int, lengths: list[int], index: int = 0, opens: bool = True,
          segments: list[np.ndarray] | None = None, model: int = 0) -> QueuedPiece:
    """A piece whose sequences start with ids 100 * request + its number, `lengths` tokens each."""
    seqs = [np.full(n, 100 * request + i, np.int32) for i, n in enumerate(lengths)]
    batch = pack(seqs, segments)
    message = Piece(request, index, 0, batch.num_tokens, batch.num_seqs, batch.max_seqlen, batch.num_outputs,
                    segments is not None, opens, model)
    return QueuedPiece(front_end, message, batch)


def firsts(batch) -> list[int]:
    cu = batch.packed.cu_seqlens
    return [int(batch.packed.input_ids[cu[i]]) for i in range(batch.packed.num_seqs)]


def test_batches_follow_arrival_order_across_requests_and_front_ends_within_the_budget():
    queue = PieceQueue(max_batch_tokens=10, max_batch_seqs=8)
    for p in (piece("a", 1, [3, 3]), piece("b", 2, [3]), piece("a", 3, [4, 1])):
        assert queue.offer(p)
    assert queue.queued_tokens == 14
    first = queue.cut()
    assert firsts(first) == [100, 101, 200]  # request 3's 4 tokens would pass 10
    assert first.packed.num_tokens == 9 and queue.queued_tokens == 5
    second = queue.cut()
    assert firsts(second) == [300, 301] and queue.cut() is None and not queue


def test_one_queue_serves_two_models_first_come_first_served_with_a_batch_per_model():
    queue = PieceQueue(max_batch_tokens=10, max_batch_seqs=8)
    arrivals = [piece("a", 1, [3], model=0), piece("b", 2, [2], model=1), piece("a", 3, [3], model=0),
                piece("b", 4, [4, 4], model=1), piece("a", 5, [2], model=0), piece("b", 6, [2], model=1)]
    for p in arrivals:
        assert queue.offer(p)
    cuts = []
    while (batch := queue.cut()) is not None:
        assert {s.piece.model for s in batch.slices} == {batch.model}  # one model's inputs per batch
        cuts.append((batch.model, firsts(batch)))
    # The oldest piece's model goes first and takes its model's later pieces, within the budget;
    # then the oldest piece left decides again (request 6 waits for the budget, not for model 0).
    assert cuts == [(0, [100, 300, 500]), (1, [200, 400, 401]), (1, [600])]
    assert queue.queued_tokens == 0 and not queue and queue.num_pieces == 0


def test_a_model_whose_head_is_older_goes_first_even_behind_a_busy_model():
    queue = PieceQueue(max_batch_tokens=4, max_batch_seqs=8)
    for p in (piece("a", 1, [4], model=0), piece("a", 2, [4], model=0), piece("b", 3, [1], model=1),
              piece("a", 4, [4], model=0)):
        queue.offer(p)
    assert [(b.model, firsts(b)) for b in iter(queue.cut, None)] == [(0, [100]), (0, [200]), (1, [300]), (0, [400])]


def test_cancel_reaches_every_model():
    queue = PieceQueue(max_batch_tokens=100, max_batch_seqs=8)
    for p in (piece("a", 1, [3], model=0), piece("a", 1, [2], index=1, opens=False, model=1), piece("a", 2, [5], model=1)):
        queue.offer(p)
    assert len(queue.cancel("a", 1)) == 2 and queue.queued_tokens == 5
    assert [(b.model, firsts(b)) for b in iter(queue.cut, None)] == [(1, [200])]


def test_a_piece_is_split_across_batches_and_its_rows_stay_its_own():
    queue = PieceQueue(max_batch_tokens=8, max_batch_seqs=8)
    big = piece("a", 1, [3, 3, 3, 3, 3])
    queue.offer(big)
    cuts = [queue.cut(), queue.cut(), queue.cut()]
    assert [(s.lo, s.hi, s.first_row, s.num_rows) for c in cuts for s in c.slices] == [
        (0, 2, 0, 2), (2, 4, 2, 2), (4, 5, 4, 1)]
    assert big.num_batches == 3 and big.is_fully_cut and not big.is_settled  # nothing has landed yet
    big.num_landed = 3
    assert big.is_settled


def test_the_vector_cap_counts_segments():
    queue = PieceQueue(max_batch_tokens=100, max_batch_seqs=3)
    segments = [np.array([0, 0, 1, 1], np.int32), np.array([0, 1, 1, -1], np.int32)]
    queue.offer(piece("a", 1, [4, 4], segments=segments))  # two sequences, four vectors
    first, second = queue.cut(), queue.cut()
    assert first.packed.num_outputs == 2 and second.packed.num_outputs == 2
    assert [(s.first_row, s.num_rows) for s in first.slices + second.slices] == [(0, 2), (2, 2)]


def test_a_sequence_longer_than_what_is_left_waits_for_the_next_batch_and_one_always_fits():
    queue = PieceQueue(max_batch_tokens=8, max_batch_seqs=8)
    queue.offer(piece("a", 1, [5]))
    queue.offer(piece("b", 2, [8]))
    assert firsts(queue.cut()) == [100]
    assert firsts(queue.cut()) == [200]


def test_a_full_queue_refuses_new_requests_and_all_their_pieces_but_never_an_admitted_one():
    queue = PieceQueue(max_batch_tokens=16, max_batch_seqs=8, max_queued_tokens=10)
    assert queue.offer(piece("a", 1, [8]))  # an empty queue takes anything
    assert not queue.offer(piece("b", 2, [8]))  # 16 > 10: refused
    assert not queue.offer(piece("b", 2, [1], index=1, opens=False))  # ... and the rest of that request
    assert queue.offer(piece("a", 1, [8], index=1, opens=False))  # an admitted request goes on
    assert queue.offer(piece("c", 3, [1])) is False
    queue.cancel("b", 2)  # the front end is done with the refused request: a new one may come
    queue.cut()
    assert queue.queued_tokens == 0 and queue.offer(piece("b", 2, [8]))


def test_cancel_drops_what_has_not_run_and_says_which_pieces_are_settled():
    queue = PieceQueue(max_batch_tokens=6, max_batch_seqs=8)
    running, waiting = piece("a", 1, [3, 3, 3]), piece("a", 1, [3], index=1)
    other = piece("b", 1, [3])  # another front end's request 1
    for p in (running, waiting, other):
        queue.offer(p)
    batch = queue.cut()
    assert [s.piece for s in batch.slices] == [running]
    settled = queue.cancel("a", 1)
    assert settled == [waiting]  # nothing of it ran; `running` still has a batch on the device
    assert running.is_cancelled and not running.is_settled
    assert firsts(queue.cut()) == [100]  # front end b's request, untouched
    assert queue.queued_tokens == 0
    running.num_landed = 1
    assert running.is_settled


def test_a_front_end_that_is_gone_is_forgotten():
    queue = PieceQueue(max_batch_tokens=6, max_batch_seqs=8, max_queued_tokens=1)
    queue.offer(piece("a", 1, [3]))
    queue.offer(piece("a", 2, [3]))  # refused: its note goes too
    queue.offer(piece("b", 3, [1], opens=False))
    assert len(queue.forget("a")) == 1 and queue.num_pieces == 1 and queue.queued_tokens == 1


def test_a_piece_whose_rows_are_not_free_waits_at_the_head_and_the_batch_goes_without_it():
    free = {"a": 2}

    def take_rows(p):
        if free[p.front_end] < p.batch.num_outputs:
            return None
        free[p.front_end] -= p.batch.num_outputs
        return 0

    queue = PieceQueue(max_batch_tokens=100, max_batch_seqs=8, take_rows=take_rows)
    queue.offer(piece("a", 1, [3, 3]))
    queue.offer(piece("a", 2, [3]))
    assert firsts(queue.cut()) == [100, 101]
    assert queue.cut() is None and queue.num_pieces == 1  # its front end has not read the first piece's rows
    free["a"] = 2
    assert firsts(queue.cut()) == [200]


def test_the_allocator_takes_first_fit_and_joins_what_is_given_back():
    alloc = Allocator(10)
    a, b, c = alloc.take(4), alloc.take(4), alloc.take(2)
    assert (a, b, c) == (0, 4, 8) and alloc.take(1) is None
    alloc.give_back(b, 4)
    assert alloc.take(5) is None and alloc.take(3) == 4
    alloc.give_back(4, 3)
    alloc.give_back(a, 4)
    alloc.give_back(c, 2)
    assert alloc.num_free == 10 and alloc.take(10) == 0


def test_a_piece_written_to_the_arena_reads_back_as_the_same_batch():
    layout = ArenaLayout.for_budget(max_batch_tokens=64, max_batch_seqs=8, dim=4)
    arena = Arena.create(layout)
    try:
        segments = [np.array([0, 1, 1], np.int32), np.array([-1, 0, 0, 0], np.int32)]
        batch = pack([np.arange(3, dtype=np.int32), np.arange(10, 14, dtype=np.int32)], segments)
        message = Piece(7, 2, 5, batch.num_tokens, batch.num_seqs, batch.max_seqlen, batch.num_outputs, True, True)
        arena.write_piece(message.offset, batch)
        sent = decode_to_engine(encode(message))
        back = arena.read_piece(sent.offset, sent.num_tokens, sent.num_seqs, sent.max_seqlen, sent.is_segmented)
        for name in ("input_ids", "positions", "cu_seqlens", "segment_ids", "cu_segments"):
            np.testing.assert_array_equal(getattr(back, name), getattr(batch, name))
        assert back.num_outputs == 3 == batch.num_outputs
    finally:
        arena.close()
