"""The express lane's hold on small requests between batches (engine/queue/express_lane.py): on the CPU
with fair scheduling, while larger requests wait, the small ones go first as a batch of their own when
the lane's pace allows a run, and stay out of the large batches until then, instead of riding a large
batch and waiting for all of it."""

from __future__ import annotations

import time

from msgspec.structs import replace

from rose_embed.engine.queue.express_lane import LANE_SHARE, ExpressLane
from rose_embed.engine.queue.piece_queue import PieceQueue
from tests.unit.test_fair_batches import bulk, owners
from tests.unit.test_piece_queue import piece


class _Board(dict):
    def add(self, key: str, n: int) -> None:
        self[key] = self.get(key, 0) + n


class _Loop:
    """What the lane's `cut` reads of the engine loop."""

    def __init__(self, queue: PieceQueue):
        self.queue, self.board, self.front_ends = queue, _Board(), {}


def _query(front_end: str, request: int, length: int = 9):
    small = piece(front_end, request, [length])
    small.message = replace(small.message, is_small=True)
    return small


def _lane(queue: PieceQueue, **options) -> ExpressLane:
    return ExpressLane(_Loop(queue), **options)


def _ran(lane: ExpressLane, batch, seconds: float = 3600.0) -> None:
    """The loop computes the lane's batch (on the CPU, inside its launch), which paces the lane."""
    with lane.interrupting(batch):
        pass
    lane.next_run += seconds  # as if the run had taken longer: a test's pauses never pass the pace


def test_a_query_beside_a_bulk_request_is_a_batch_of_its_own_when_the_lane_s_pace_allows():
    queue = PieceQueue(max_batch_tokens=512, max_batch_seqs=1024)
    lane = _lane(queue)
    bulk(queue, "a", 1, num_texts=1000, length=32)
    queue.offer(_query("b", 2))
    queue.offer(_query("c", 3))
    express = lane.cut()  # the lane has not run yet
    assert owners(express) == [2, 3] and express.packed.num_tokens == 18
    assert lane.loop.board == {"express_batches": 1}
    _ran(lane, express)
    after = lane.cut()
    assert set(owners(after)) == {1} and after.packed.num_tokens == 512  # the bulk request's batches stay full


def test_a_run_paces_the_next_in_proportion_to_its_length():
    queue = PieceQueue(max_batch_tokens=512, max_batch_seqs=1024)
    lane = _lane(queue)
    bulk(queue, "a", 1, num_texts=1000, length=32)
    queue.offer(_query("b", 2))
    express = lane.cut()
    before = time.monotonic()
    with lane.interrupting(express):  # the loop computes it
        time.sleep(0.05)
    after = time.monotonic()
    factor = (1 - LANE_SHARE) / LANE_SHARE  # the run takes LANE_SHARE of its run and the pause after it
    assert before + 0.05 * (1 + factor) <= lane.next_run <= after + (after - before) * factor


def test_within_the_pace_a_query_stays_out_of_the_bulk_batch_for_the_lane_s_next_run():
    queue = PieceQueue(max_batch_tokens=512, max_batch_seqs=1024)
    lane = _lane(queue)
    bulk(queue, "a", 1, num_texts=1000, length=32)
    queue.offer(_query("b", 2))
    _ran(lane, express := lane.cut())
    assert owners(express) == [2]
    queue.offer(_query("c", 3))  # right after the lane's run
    held = lane.cut()
    assert set(owners(held)) == {1} and held.packed.num_tokens == 512
    assert queue.holds_small  # for the lane's next run, between this batch's layers or before the next
    lane.next_run = time.monotonic()
    assert owners(lane.cut()) == [3]


def test_the_lane_takes_one_batch_of_small_ones_a_run_so_a_stream_of_queries_cannot_hold_a_bulk_request():
    queue = PieceQueue(max_batch_tokens=64, max_batch_seqs=1024)
    lane = _lane(queue)
    bulk(queue, "a", 1, num_texts=10, length=32)
    batches = []
    while queue.holds_large and len(batches) < 100:
        for k in range(4):  # queries arrive before every batch
            queue.offer(_query(f"q{len(batches)}-{k}", 2 + len(batches)))
        batch = lane.cut()
        _ran(lane, batch)
        batches.append(owners(batch))
    assert len(batches) == 6  # one express batch, then the bulk request's 10 texts, two a batch
    assert 1 not in batches[0] and all(set(b) == {1} for b in batches[1:])


def test_queries_alone_and_the_lane_off_take_the_queue_s_own_batches():
    queue = PieceQueue(max_batch_tokens=512, max_batch_seqs=1024)
    queue.offer(_query("b", 2))
    assert owners(_lane(queue).cut()) == [2]  # nothing larger waits: the queue's batch as ever
    bulk(queue, "a", 1, num_texts=100, length=32)
    queue.offer(_query("c", 3))
    off = _lane(queue, is_on=False)  # a GPU, or --scheduling fcfs
    assert owners(off.cut())[:1] == [3] and 1 in owners(off.cut())


def test_small_ones_go_at_once_where_no_larger_request_can_go():
    queue = PieceQueue(max_batch_tokens=512, max_batch_seqs=1024, take_rows=lambda p: None if p.key[0] == "a" else 0)
    lane = _lane(queue)
    bulk(queue, "a", 1, num_texts=100, length=32)  # its rows are all taken
    queue.offer(_query("b", 2))
    lane.next_run = float("inf")  # the lane's pace holds them
    assert owners(lane.cut()) == [2]
