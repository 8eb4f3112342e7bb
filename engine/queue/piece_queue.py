"""Tulip: one first-come-first-served queue of pieces per engine, cut into batches by token volume.

Every front end's pieces land here in arrival order. A batch takes sequences from the
pieces at the head until the next would pass the token budget or the vector cap, so a piece
may be split across batches and a batch holds pieces of several requests and front ends.
Pieces whose request was cancelled are skipped.

A batch holds one model's inputs (the engine runs one model's graphs at a time). Each batch
serves the model of the oldest piece waiting and takes that model's pieces in arrival order,
past any of other models in between: so every piece waits at most one batch longer than
strict arrival order would make it, and batches stay as full as one model's load allows
instead of breaking at every change of model. Admission is decided here, with the whole
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
    def model(self) -> int:
        return self.message.model

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
    def model(self) -> int:
        """The model that computes it: every slice's."""
        return self.slices[0].piece.model

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
        # Per model, in arrival order, each piece with its arrival number: the oldest head decides
        # which model the next batch serves.
        self._by_model: dict[int, collections.deque[tuple[int, QueuedPiece]]] = {}
        self._arrivals = 0
        self._queued_tokens = 0
        self._refused: set[tuple[object, int]] = set()  # requests whose opening piece was refused

    @property
    def queued_tokens(self) -> int:
        """Tokens waiting, not yet in a batch."""
        return self._queued_tokens

    @property
    def num_pieces(self) -> int:
        return sum(map(len, self._by_model.values()))

    def __bool__(self) -> bool:
        return bool(self._by_model)

    def offer(self, piece: QueuedPiece) -> bool:
        """Queue the piece, or refuse it (False): the queue is full for a new request."""
        key = piece.key
        if key in self._refused:
            return False
        tokens = piece.batch.num_tokens
        if (piece.message.opens_request and self.max_queued_tokens is not None and self._by_model
                and self._queued_tokens + tokens > self.max_queued_tokens):
            self._refused.add(key)
            return False
        self._by_model.setdefault(piece.model, collections.deque()).append((self._arrivals, piece))
        self._arrivals += 1
        self._queued_tokens += tokens
        return True

    def cancel(self, front_end: object, request: int) -> list[QueuedPiece]:
        """Drop what has not run of the request's pieces; returns those now settled (nothing of
        theirs on the device), which can be answered at once. The others are answered as their
        batches land."""
        key = (front_end, request)
        self._refused.discard(key)
        settled = []
        for model, pieces in list(self._by_model.items()):
            kept = collections.deque()
            for arrival, piece in pieces:
                if piece.key != key:
                    kept.append((arrival, piece))
                    continue
                piece.is_cancelled = True
                self._queued_tokens -= self._remaining_tokens(piece)
                if piece.is_settled:
                    settled.append(piece)
            self._set_pieces(model, kept)
        return settled

    def forget(self, front_end: object) -> list[QueuedPiece]:
        """A front end that is gone: drop every piece of its (as `cancel` does)."""
        settled = []
        requests = {p.message.request for pieces in self._by_model.values() for _, p in pieces if p.front_end is front_end}
        for request in requests:
            settled.extend(self.cancel(front_end, request))
        self._refused = {key for key in self._refused if key[0] is not front_end}
        return settled

    def cut(self) -> Batch | None:
        """The next batch, first come first served within the budget, of the oldest waiting piece's
        model; None if nothing waits."""
        if not self._by_model:
            return None
        model = min(self._by_model, key=lambda m: self._by_model[m][0][0])
        pieces = self._by_model[model]
        slices: list[Slice] = []
        tokens_left, rows_left = self.max_batch_tokens, self.max_batch_seqs
        while pieces and tokens_left > 0 and rows_left > 0:
            piece = pieces[0][1]
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
                pieces.popleft()
        self._set_pieces(model, pieces)
        if not slices:
            return None
        parts = [s.packed() for s in slices]
        return Batch(tuple(slices), parts[0] if len(parts) == 1 else join_packed(*parts))

    def _set_pieces(self, model: int, pieces: collections.deque) -> None:
        """A model with nothing waiting has no entry, so that the queue's truth is `bool(self._by_model)`."""
        if pieces:
            self._by_model[model] = pieces
        else:
            self._by_model.pop(model, None)

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
