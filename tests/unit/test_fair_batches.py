"""The fair policy of the engine's queue (engine/queue/piece_queue.py): each batch's token budget
shared among the requests that wait, by weight, with no request starved, order inside a request
kept and batches as full as before."""

from __future__ import annotations

import collections

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rose_embed.engine.queue.fair_share import water_fill
from rose_embed.engine.queue.piece_queue import PieceQueue
from tests.unit.test_piece_queue import firsts, piece


def bulk(queue: PieceQueue, front_end: str, request: int, num_texts: int, length: int, piece_texts: int = 64,
         weight: float = 1.0) -> None:
    """A bulk request's pieces of `piece_texts` texts each; text i's ids are 1000 * request + i."""
    for index, lo in enumerate(range(0, num_texts, piece_texts)):
        hi = min(lo + piece_texts, num_texts)
        queue.offer(piece(front_end, request, [length] * (hi - lo), index=index, opens=index == 0, weight=weight,
                          first_id=1000 * request + lo))


def owners(batch) -> list[int]:
    """The request each sequence of the batch belongs to."""
    return [s.piece.message.request for s in batch.slices for _ in range(s.lo, s.hi)]


def test_water_fill_gives_small_demands_all_they_ask_and_splits_the_rest_by_weight():
    assert water_fill([5, 1000, 1000], [1, 1, 1], 105) == [5, 50, 50]
    assert water_fill([1000, 1000], [3, 1], 400) == [300, 100]
    assert water_fill([10, 20], [1, 1], 100) == [10, 20]  # nobody gets more than asked
    assert sum(water_fill([7, 300, 300, 3], [1, 2, 1, 1], 256)) == 256


def test_a_one_text_request_behind_a_thousand_queued_texts_rides_in_the_next_batch():
    queue = PieceQueue(max_batch_tokens=512, max_batch_seqs=1024)
    bulk(queue, "a", 1, num_texts=1000, length=32)
    first = queue.cut()
    assert set(owners(first)) == {1} and first.packed.num_tokens == 512
    queue.offer(piece("b", 2, [9]))  # the query arrives while the bulk request has 984 texts waiting
    second = queue.cut()
    assert owners(second).count(2) == 1 and owners(second).count(1) == 15  # and the batch is as full as before
    assert queue.queued_tokens == 1000 * 32 - 31 * 32


def test_the_one_text_request_beats_fcfs_which_holds_it_behind_every_bulk_text():
    fcfs = PieceQueue(max_batch_tokens=512, max_batch_seqs=1024, scheduling="fcfs")
    bulk(fcfs, "a", 1, num_texts=1000, length=32)
    fcfs.offer(piece("b", 2, [9]))
    batches_before = 0
    while 2 not in owners(fcfs.cut()):
        batches_before += 1
    assert batches_before == 62  # 32,000 bulk tokens at 16 texts a batch, then the query with the last 8


def test_two_bulk_requests_advance_together():
    queue = PieceQueue(max_batch_tokens=512, max_batch_seqs=1024)
    bulk(queue, "a", 1, num_texts=1000, length=32)
    bulk(queue, "a", 2, num_texts=1000, length=32)
    batches = [collections.Counter(owners(queue.cut())) for _ in range(20)]
    for one in batches:
        assert sum(one.values()) == 16  # full
    for earlier, later in zip(batches, batches[1:]):
        assert (earlier + later)[1] == (earlier + later)[2] == 16  # a batch each, in turn
    total = sum(batches, collections.Counter())
    assert total[1] == total[2] == 160


def test_two_bulk_requests_from_different_front_ends_advance_together_with_uneven_lengths():
    queue = PieceQueue(max_batch_tokens=1000, max_batch_seqs=1024)
    bulk(queue, "a", 1, num_texts=1000, length=37)
    bulk(queue, "b", 2, num_texts=1000, length=101)
    tokens = collections.Counter()
    for _ in range(40):
        batch = queue.cut()
        for s in batch.slices:
            cu = s.piece.batch.cu_seqlens
            tokens[s.piece.message.request] += int(cu[s.hi] - cu[s.lo])
        assert batch.packed.num_tokens > 1000 - 101  # as full as whole sequences allow
    assert abs(tokens[1] - tokens[2]) <= 1000 + 101  # equal shares, within a batch and a sequence


def test_weight_w_gets_w_times_the_tokens_of_weight_one_over_a_window():
    queue = PieceQueue(max_batch_tokens=600, max_batch_seqs=1024)
    bulk(queue, "a", 1, num_texts=2000, length=30, weight=1.0)
    bulk(queue, "a", 2, num_texts=2000, length=30, weight=3.0)
    bulk(queue, "b", 3, num_texts=2000, length=45, weight=0.5)
    tokens = collections.Counter()
    for _ in range(60):
        for s in queue.cut().slices:
            cu = s.piece.batch.cu_seqlens
            tokens[s.piece.message.request] += int(cu[s.hi] - cu[s.lo])
    total = sum(tokens.values())
    assert total == 60 * 600 or total >= 60 * (600 - 45)
    assert abs(tokens[2] / tokens[1] - 3.0) < 0.05
    assert abs(tokens[3] / tokens[1] - 0.5) < 0.05


def test_order_inside_a_request_holds_across_pieces_and_batches():
    queue = PieceQueue(max_batch_tokens=300, max_batch_seqs=1024)
    bulk(queue, "a", 1, num_texts=200, length=17, piece_texts=7)
    bulk(queue, "a", 2, num_texts=150, length=23, piece_texts=64)
    queue.offer(piece("b", 3, [5, 6, 7], first_id=3000))
    seen = collections.defaultdict(list)
    while (batch := queue.cut()) is not None:
        for request, first_id in zip(owners(batch), firsts(batch)):
            seen[request].append(first_id)
    assert seen[1] == [1000 + i for i in range(200)]
    assert seen[2] == [2000 + i for i in range(150)]
    assert seen[3] == [3000, 3001, 3002]


def test_a_request_of_sequences_longer_than_its_share_is_not_starved_by_many_short_ones():
    queue = PieceQueue(max_batch_tokens=256, max_batch_seqs=1024)
    queue.offer(piece("a", 1, [200] * 10, first_id=1000))  # each sequence is more than any share
    for request in range(2, 12):
        bulk(queue, "b", request, num_texts=500, length=8)
    served = []
    for _ in range(60):
        served += [r for r in owners(queue.cut()) if r == 1]
    assert len(served) >= 3  # its credit grows until a sequence fits, batch after batch


def test_a_query_for_one_model_waits_at_most_one_batch_of_another():
    queue = PieceQueue(max_batch_tokens=512, max_batch_seqs=1024)
    bulk(queue, "a", 1, num_texts=1000, length=32)
    queue.cut()
    queue.offer(piece("b", 2, [9], model=1))
    assert queue.cut().model == 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 40), st.integers(1, 90), st.sampled_from([0.5, 1.0, 2.0])),
                min_size=1, max_size=8),
       st.integers(64, 400), st.integers(2, 64))
def test_every_sequence_comes_out_once_in_order_and_batches_stay_within_the_budget(requests, budget, max_seqs):
    queue = PieceQueue(max_batch_tokens=budget, max_batch_seqs=max_seqs)
    rng = np.random.default_rng(len(requests) * budget)
    for request, (num_texts, longest, weight) in enumerate(requests, start=1):
        lengths = rng.integers(1, longest + 1, num_texts).tolist()
        for index, lo in enumerate(range(0, num_texts, 5)):
            queue.offer(piece("a", request, lengths[lo:lo + 5], index=index, weight=weight,
                              first_id=1000 * request + lo))
    seen = collections.defaultdict(list)
    total = sum(num for num, _, _ in requests)
    while (batch := queue.cut()) is not None:
        assert batch.packed.num_tokens <= budget or batch.packed.num_seqs == 1
        assert batch.packed.num_seqs <= max_seqs
        for request, first_id in zip(owners(batch), firsts(batch)):
            seen[request].append(first_id)
    assert sum(map(len, seen.values())) == total and queue.queued_tokens == 0
    for request, (num_texts, _, _) in enumerate(requests, start=1):
        assert seen[request] == [1000 * request + i for i in range(num_texts)]


def test_a_piece_taken_by_two_passes_of_one_batch_is_one_slice_of_it():
    queue = PieceQueue(max_batch_tokens=100, max_batch_seqs=64)
    queue.offer(piece("a", 1, [30, 30, 30, 30], first_id=1000))
    queue.offer(piece("b", 2, [80], first_id=2000, weight=2.0))
    # a's turn (half of b's quantum) takes one sequence; b's 80 do not fit the room left: a's next two fill it
    batch = queue.cut()
    assert firsts(batch) == [1000, 1001, 1002]
    (only,) = batch.slices
    assert (only.lo, only.hi, only.first_row, only.num_rows, only.piece.num_batches) == (0, 3, 0, 3, 1)
    assert firsts(queue.cut()) == [2000]  # b's turn goes on
    assert firsts(queue.cut()) == [1003]


def test_a_sequence_as_long_as_the_budget_is_not_held_back_for_ever_by_a_stream_of_queries():
    queue = PieceQueue(max_batch_tokens=256, max_batch_seqs=64)
    queue.offer(piece("a", 1, [256, 256], first_id=1000))
    batches = []
    for number in range(12):
        queue.offer(piece("q", 100 + number, [9], first_id=5000 + number))  # a query before every batch
        batches.append(firsts(queue.cut()))
    served = [i for i, batch in enumerate(batches) if {1000, 1001} & set(batch)]
    assert len(served) == 2 and served[0] <= 3  # its credit covers a whole batch after a few
    assert all(5000 + i in batch or i in served for i, batch in enumerate(batches))
