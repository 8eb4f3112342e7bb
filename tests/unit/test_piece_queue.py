"""The engine's queue (engine/queue/piece_queue.py) and the arena's allocator (engine/contract/arena.py), as
pure bookkeeping: batches by token volume, either policy's order, cancellation. The fair policy's
shares have tests of their own (tests/unit/test_fair_batches.py)."""

from __future__ import annotations

import numpy as np

from rose_embed.engine.contract.arena import Allocator, Arena, ArenaLayout
from rose_embed.engine.contract.messages import Piece, decode_to_engine, encode
from rose_embed.engine.queue.piece_queue import PieceQueue, QueuedPiece
from rose_embed.engine.contract.batch import pack


def piece(front_end: str, request: int, lengths: list[int], index: int = 0, opens: bool = True,
          segments: list[np.ndarray] | None = None, model: int = 0, weight: float = 1.0,
          first_id: int | None = None) -> QueuedPiece:
    """A piece whose sequences start with ids `first_id` (default 100 * request) + their number, `lengths` tokens each."""
    first_id = 100 * request if first_id is None else first_id
    seqs = [np.full(n, first_id + i, np.int32) for i, n in enumerate(lengths)]
    batch = pack(seqs, segments)
    message = Piece(request, index, 0, batch.num_tokens, batch.num_seqs, batch.max_seqlen, batch.num_outputs,
                    segments is not None, opens, model, weight)
    return QueuedPiece(front_end, message, batch)


def firsts(batch) -> list[int]:
    cu = batch.packed.cu_seqlens
    return [int(batch.packed.input_ids[cu[i]]) for i in range(batch.packed.num_seqs)]


def test_fcfs_batches_follow_arrival_order_across_requests_and_front_ends_within_the_budget():
    queue = PieceQueue(max_batch_tokens=10, max_batch_seqs=8, scheduling="fcfs")
    for p in (piece("a", 1, [3, 3]), piece("b", 2, [3]), piece("a", 3, [4, 1])):
        queue.offer(p)
    assert queue.queued_tokens == 14
    first = queue.cut()
    assert firsts(first) == [100, 101, 200]  # request 3's 4 tokens would pass 10
    assert first.packed.num_tokens == 9 and queue.queued_tokens == 5
    second = queue.cut()
    assert firsts(second) == [300, 301] and queue.cut() is None and not queue


def test_fcfs_serves_the_oldest_requests_model_and_takes_its_later_requests_within_the_budget():
    queue = PieceQueue(max_batch_tokens=10, max_batch_seqs=8, scheduling="fcfs")
    arrivals = [piece("a", 1, [3], model=0), piece("b", 2, [2], model=1), piece("a", 3, [3], model=0),
                piece("b", 4, [4, 4], model=1), piece("a", 5, [2], model=0), piece("b", 6, [2], model=1)]
    for p in arrivals:
        queue.offer(p)
    cuts = []
    while (batch := queue.cut()) is not None:
        assert {s.piece.model for s in batch.slices} == {batch.model}  # one model's inputs per batch
        cuts.append((batch.model, firsts(batch)))
    assert cuts == [(0, [100, 300, 500]), (1, [200, 400, 401]), (1, [600])]
    assert queue.queued_tokens == 0 and not queue and queue.num_pieces == 0


def test_fair_models_take_turns_so_a_query_for_one_model_is_not_held_behind_anothers_bulk():
    queue = PieceQueue(max_batch_tokens=4, max_batch_seqs=8)
    for p in (piece("a", 1, [4], model=0), piece("a", 2, [4], model=0), piece("b", 3, [1], model=1),
              piece("a", 4, [4], model=0)):
        queue.offer(p)
    models = [b.model for b in iter(queue.cut, None)]
    assert models[:2] == [0, 1]  # model 1's query goes second, not after every earlier bulk piece
    assert sorted(models) == [0, 0, 0, 1]


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


def test_cancel_drops_what_has_not_run_and_says_which_pieces_are_settled():
    queue = PieceQueue(max_batch_tokens=6, max_batch_seqs=8, scheduling="fcfs")
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
    queue = PieceQueue(max_batch_tokens=6, max_batch_seqs=8)
    queue.offer(piece("a", 1, [3]))
    queue.offer(piece("a", 2, [3]))
    queue.offer(piece("b", 3, [1], opens=False))
    assert len(queue.forget("a")) == 2 and queue.num_pieces == 1 and queue.queued_tokens == 1


def test_a_request_whose_rows_are_not_free_sits_out_and_the_batch_goes_without_it():
    free = {"a": 2, "b": 1}

    def take_rows(p):
        if free[p.front_end] < p.batch.num_outputs:
            return None
        free[p.front_end] -= p.batch.num_outputs
        return 0

    queue = PieceQueue(max_batch_tokens=100, max_batch_seqs=8, take_rows=take_rows)
    queue.offer(piece("a", 1, [3, 3]))
    queue.offer(piece("a", 2, [3]))
    queue.offer(piece("b", 3, [3, 3]))
    # The smallest request goes first and takes one of a's rows: neither two-sequence piece finds two free.
    assert firsts(queue.cut()) == [200]
    assert queue.cut() is None and queue.num_pieces == 2  # their front ends have not read earlier rows
    free["b"] = 2
    assert firsts(queue.cut()) == [300, 301]
    free["a"] = 2
    assert firsts(queue.cut()) == [100, 101] and not queue


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


def test_a_batch_cut_at_a_smaller_budget_holds_the_query_and_fills_the_rest_with_bulk():
    """A GPU's express batch (engine/queue/engine_loop.py): the budget given to `cut` holds, the query goes
    in whole, the bulk request fills what is left, and the next batch is back at the full budget."""
    queue = PieceQueue(max_batch_tokens=40, max_batch_seqs=16)
    queue.offer(piece("a", 1, [4] * 20))
    queue.offer(piece("b", 2, [2]))
    express = queue.cut(max_tokens=10)
    assert sorted(firsts(express)) == [100, 101, 200] and express.packed.num_tokens == 10
    assert queue.cut().packed.num_tokens == 40
    assert queue.cut(max_tokens=100).packed.num_tokens == 32  # never past the queue's own budget, 40
