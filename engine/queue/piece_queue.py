"""Tulip: one first-come-first-served queue of pieces per engine, cut into batches by token volume.

Every front end's pieces land here in arrival order. A batch takes sequences from the
pieces at the head until the next would pass the token budget or the vector cap, so a piece
may be split across batches and a batch holds pieces of several requests and front ends.
Pieces whose request was cancelled are skipped. Admission is decided here, with the whole
queue in view: when it holds more than `max_queued_tokens`, a request's opening piece is
refused at once (the front end answers 429 with Retry-After), and so is every later piece
of that request; the pieces of a request already admitted are never refused.

A piece's vector rows are taken (`take_rows`) when its first batch is cut: a piece whose
rows are not free yet waits at the head, and the batch goes without it.

Pure bookkeeping: no pipes, no device. engine/queue/engine_loop.py drives it.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from engine.messages import Piece
from engine.rose.batch import PackedBatch, join_packed, slice_packed


@dataclass(eq=False)
class QueuedPiece:
    """A piece in the queue, its arrays as views of its front end's arena."""

    front_end: object  # whoever sent it; (front_end, request) names a request
    message: Piece
    batch: PackedBatch
    next_seq: int = 0  # its first sequence not yet in a batch
    first_row: int | None = None  # where its vectors go in its front end's rows, once taken
    num_batches: int = 0  # batches that took some of it
    num_landed: int = 0  # ... of which have finished (landed or failed)
    error: str | None = None
    is_cancelled: bool = False
    started: float = 0.0  # time.monotonic() of its first batch's launch
    finished: float = 0.0

    @property
    def key(self) -> tuple[object, int]:
        return self.front_end, self.message.request

    @property
    def is_fully_cut(self) -> bool:
        return self.next_seq >= self.batch.num_seqs

    @property
    def is_settled(self) -> bool:
        """Nothing of it is left to run or to land: it can be answered."""
        return (self.is_fully_cut or self.is_cancelled) and self.num_landed == self.num_batches


@dataclass(frozen=True)
class Slice:
    """Sequences [lo, hi) of a piece in a batch; their vectors are the piece's rows [first_row, first_row + num_rows)."""

    piece: QueuedPiece
    lo: int
    hi: int
    first_row: int
    num_rows: int

    def packed(self) -> PackedBatch:
        """Its sequences as a batch: the piece's own where it is the whole piece (no copy)."""
        batch = self.piece.batch
        return batch if (self.lo, self.hi) == (0, batch.num_seqs) else slice_packed(batch, self.lo, self.hi)


@dataclass(frozen=True)
class Batch:
    slices: tuple[Slice, ...]
    packed: PackedBatch

    @property
    def pieces(self) -> list[QueuedPiece]:
        return [s.piece for s in self.slices]


class PieceQueue:
    def __init__(self, max_batch_tokens: int, max_batch_seqs: int, max_queued_tokens: int | None = None,
                 take_rows: Callable[[QueuedPiece], int | None] = lambda piece: 0):
        """`take_rows(piece)`: the first of the piece's vector rows, now taken, or None while
        they are not free."""
        self.max_batch_tokens, self.max_batch_seqs = max_batch_tokens, max_batch_seqs
        self.max_queued_tokens = max_queued_tokens
        self.take_rows = take_rows
        self._pieces: collections.deque[QueuedPiece] = collections.deque()
        self._queued_tokens = 0
        self._refused: set[tuple[object, int]] = set()  # requests whose opening piece was refused

    @property
    def queued_tokens(self) -> int:
        """Tokens waiting, not yet in a batch."""
        return self._queued_tokens

    @property
    def num_pieces(self) -> int:
        return len(self._pieces)

    def __bool__(self) -> bool:
        return bool(self._pieces)

    def offer(self, piece: QueuedPiece) -> bool:
        """Queue the piece, or refuse it (False): the queue is full for a new request."""
        key = piece.key
        if key in self._refused:
            return False
        tokens = piece.batch.num_tokens
        if (piece.message.opens_request and self.max_queued_tokens is not None and self._pieces
                and self._queued_tokens + tokens > self.max_queued_tokens):
            self._refused.add(key)
            return False
        self._pieces.append(piece)
        self._queued_tokens += tokens
        return True

    def cancel(self, front_end: object, request: int) -> list[QueuedPiece]:
        """Drop what has not run of the request's pieces; returns those now settled (nothing of
        theirs on the device), which can be answered at once. The others are answered as their
        batches land."""
        key = (front_end, request)
        self._refused.discard(key)
        settled, kept = [], collections.deque()
        for piece in self._pieces:
            if piece.key != key:
                kept.append(piece)
                continue
            piece.is_cancelled = True
            self._queued_tokens -= self._remaining_tokens(piece)
            if piece.is_settled:
                settled.append(piece)
        self._pieces = kept
        return settled

    def forget(self, front_end: object) -> list[QueuedPiece]:
        """A front end that is gone: drop every piece of its (as `cancel` does)."""
        settled = []
        for request in {p.message.request for p in self._pieces if p.front_end is front_end}:
            settled.extend(self.cancel(front_end, request))
        self._refused = {key for key in self._refused if key[0] is not front_end}
        return settled

    def cut(self) -> Batch | None:
        """The next batch, first come first served within the budget; None if nothing waits."""
        slices: list[Slice] = []
        tokens_left, rows_left = self.max_batch_tokens, self.max_batch_seqs
        while self._pieces and tokens_left > 0 and rows_left > 0:
            piece = self._pieces[0]
            batch, lo = piece.batch, piece.next_seq
            hi = _fit(batch, lo, tokens_left, rows_left)
            if hi == lo:
                if slices:
                    break
                hi = lo + 1  # one sequence always fits an empty batch: the front end cut it so
            if piece.first_row is None:
                piece.first_row = self.take_rows(piece)
                if piece.first_row is None:  # its front end has not read earlier vectors yet
                    break
            first_row, num_rows = _rows(batch, lo, hi)
            slices.append(Slice(piece, lo, hi, first_row, num_rows))
            num_tokens = int(batch.cu_seqlens[hi] - batch.cu_seqlens[lo])
            tokens_left -= num_tokens
            rows_left -= num_rows
            self._queued_tokens -= num_tokens
            piece.next_seq = hi
            piece.num_batches += 1
            if piece.is_fully_cut:
                self._pieces.popleft()
        if not slices:
            return None
        parts = [s.packed() for s in slices]
        return Batch(tuple(slices), parts[0] if len(parts) == 1 else join_packed(*parts))

    @staticmethod
    def _remaining_tokens(piece: QueuedPiece) -> int:
        cu = piece.batch.cu_seqlens
        return int(cu[-1] - cu[piece.next_seq])


def _fit(batch: PackedBatch, lo: int, max_tokens: int, max_rows: int) -> int:
    """The largest hi such that sequences [lo, hi) hold at most max_tokens tokens and max_rows vectors."""
    cu = batch.cu_seqlens
    hi = int(np.searchsorted(cu, int(cu[lo]) + max_tokens, side="right")) - 1
    if batch.cu_segments is None:
        return max(lo, min(hi, lo + max_rows))
    cs = batch.cu_segments
    by_rows = int(np.searchsorted(cs, int(cs[lo]) + max_rows, side="right")) - 1
    return max(lo, min(hi, by_rows))


def _rows(batch: PackedBatch, lo: int, hi: int) -> tuple[int, int]:
    if batch.cu_segments is None:
        return lo, hi - lo
    return int(batch.cu_segments[lo]), int(batch.cu_segments[hi] - batch.cu_segments[lo])
