"""The express lane between two batches (engine/queue/express_lane.py): on the CPU with fair scheduling,
small requests that wait beside larger ones go first, as a batch of their own, instead of riding the
next large batch and waiting for all of it."""

from __future__ import annotations

from msgspec.structs import replace

from rose_embed.engine.queue.express_lane import ExpressLane
from rose_embed.engine.queue.piece_queue import PieceQueue
from tests.unit.test_fair_batches import bulk, owners
from tests.unit.test_piece_queue import piece


class _Board(dict):
    def add(self, key: str, n: int) -> None:
        self[key] = self.get(key, 0) + n


class _Loop:
    """What cut_between_batches reads of the engine loop."""

    def __init__(self, queue: PieceQueue):
        self.queue, self.board, self.front_ends = queue, _Board(), {}


def _query(front_end: str, request: int, length: int = 9):
    small = piece(front_end, request, [length])
    small.message = replace(small.message, is_small=True)
    return small


def _next(lane: ExpressLane, queue: PieceQueue):
    return lane.cut_between_batches() or queue.cut()


def test_a_query_waiting_beside_a_bulk_request_is_a_batch_of_its_own_before_the_next_bulk_batch():
    queue = PieceQueue(max_batch_tokens=512, max_batch_seqs=1024)
    lane = ExpressLane(_Loop(queue))
    bulk(queue, "a", 1, num_texts=1000, length=32)
    assert set(owners(_next(lane, queue))) == {1}  # no query waits: the bulk request's batch, full
    queue.offer(_query("b", 2))
    queue.offer(_query("c", 3))
    express = _next(lane, queue)
    assert owners(express) == [2, 3] and express.packed.num_tokens == 18
    assert lane.loop.board == {"express_batches": 1}
    after = _next(lane, queue)
    assert set(owners(after)) == {1} and after.packed.num_tokens == 512  # the bulk request's batches stay full


def test_queries_alone_and_the_lane_off_take_the_queue_s_own_batches():
    queue = PieceQueue(max_batch_tokens=512, max_batch_seqs=1024)
    lane = ExpressLane(_Loop(queue))
    queue.offer(_query("b", 2))
    assert lane.cut_between_batches() is None  # nothing larger waits: the queue's batch serves them as well
    off = ExpressLane(_Loop(queue), is_on=False)  # a GPU, or --scheduling fcfs
    bulk(queue, "a", 1, num_texts=100, length=32)
    assert off.cut_between_batches() is None
    assert owners(queue.cut())[0] == 2


def test_a_stream_of_queries_cannot_hold_a_bulk_request_back():
    """Never two express batches in a row: each queue batch after one gives the bulk request its share."""
    queue = PieceQueue(max_batch_tokens=64, max_batch_seqs=1024)
    lane = ExpressLane(_Loop(queue))
    bulk(queue, "a", 1, num_texts=10, length=32)
    batches = []
    while queue.holds_large and len(batches) < 100:
        for k in range(2):  # queries arrive before every batch
            queue.offer(_query(f"q{len(batches)}-{k}", 2 + len(batches)))
        batches.append(owners(_next(lane, queue)))
    assert len(batches) == 20  # the bulk request's 10 texts, one a batch beside the queries, every other batch
    assert all(1 not in b for b in batches[::2]) and all(1 in b for b in batches[1::2])
