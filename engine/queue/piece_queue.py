"""Tulip: one queue of pieces per engine, cut into batches by token volume, shared fairly among requests.

Every front end's pieces land here, each in its request's line, in the order they came: the
order inside a request is kept. A batch holds one model's inputs (the engine runs one model's
graphs at a time), and of a ColBERT model either its texts or its rerank groups, never both (a
query's documents are told from texts by where they lie: engine/contract/batch.py), of a CLIP model
either its texts or its images (each tower runs alone); the classes of batch with inputs waiting
take turns.

How a batch is filled depends on the scheduling policy:
- "fair" (the default): a request that asks for less than an even share of the batch's token
  budget (engine/queue/fair_share.py), such as a one-text query, gets all it asks in the first
  batch cut after its piece arrives, whatever bulk requests hold. The rest of the budget goes to
  the larger requests in turn, by weight (deficit round robin in tokens, `_serve_in_turn`):
  over a window every request gets its weight's share and none starves. Batches are as full as
  the waiting inputs allow, as before.
- "fcfs": the seed's strict arrival order: requests in the order their pieces came, each
  taking all it can before the next one gets anything.

A piece may be split across batches, between sequences (between late-interaction groups, where
it holds them); pieces of several requests and front ends share a batch. A piece's vector rows are taken (`take_rows`) when its first batch is cut: a request
whose next piece has no rows free yet sits out this batch. Cancelled requests' pieces are
dropped. Admission is not decided here: the front ends admit a request before they tokenize
it (server/links/admission.py), seeing every front end's share of the work.

Pure bookkeeping: no pipes, no device. engine/queue/engine_loop.py drives it.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from rose_embed.engine.contract.config import SCHEDULING_POLICIES
from rose_embed.engine.contract.messages import Piece
from rose_embed.engine.queue.fair_share import water_fill
from rose_embed.engine.contract.batch import PackedBatch, join_packed, slice_packed


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
    def batch_class(self) -> tuple[int, bool, bool]:
        """The batches it may go into: its model's, of late-interaction groups, of images or of texts."""
        return self.message.model, self.batch.is_late_interaction, self.batch.is_images

    @property
    def is_fully_cut(self) -> bool:
        return self.next_seq >= self.batch.num_seqs

    @property
    def is_settled(self) -> bool:
        """Nothing of it is left to run or to land: it can be answered."""
        return (self.is_fully_cut or self.is_cancelled) and self.num_landed == self.num_batches

    @property
    def remaining_tokens(self) -> int:
        cu = self.batch.cu_seqlens
        return int(cu[-1] - cu[self.next_seq])


# A request's credit never passes this many batches' budgets: a request that cannot send (its rows are
# not free) does not bank a claim on the queue for later.
MAX_CREDIT_BATCHES = 2


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


@dataclass(eq=False)
class _Line:
    """One request's pieces waiting in the queue, in the order they came."""

    key: tuple[object, int]
    weight: float
    pieces: collections.deque[QueuedPiece] = field(default_factory=collections.deque)
    queued_tokens: int = 0
    # Tokens of its past shares that whole sequences left unused (negative: taken ahead of its share).
    credit: float = 0.0
    is_in_turn: bool = False  # its turn among the large requests has begun (its credit has its quantum)
    is_blocked: bool = False  # its next piece's rows are not free: it sits out the batch being cut
    is_small: bool = False  # the front end says the whole request is small (engine/queue/express_lane.py)
    last_class: tuple[int, bool, bool] = (-1, False, False)  # `batch_class` as last read

    @property
    def batch_class(self) -> tuple[int, bool, bool]:
        """Its next piece's QueuedPiece.batch_class (once a batch took its last piece, that one's): a batch
        holds lines of one class. A request of texts and images (a CLIP model's) holds pieces of both, in
        its order: its line takes the class of each in turn."""
        if self.pieces:
            self.last_class = self.pieces[0].batch_class
        return self.last_class


class _Filling:
    """The batch being cut: its slices and the room left in it."""

    def __init__(self, max_tokens: int, max_rows: int, batch_class: tuple[int, bool, bool]):
        self.batch_class = batch_class  # of every piece it takes (QueuedPiece.batch_class)
        self.slices: list[Slice] = []
        self._by_piece: dict[int, int] = {}  # id of a piece -> its slice's place in `slices`
        self.tokens_left, self.rows_left = max_tokens, max_rows

    @property
    def has_room(self) -> bool:
        return self.tokens_left > 0 and self.rows_left > 0

    def add(self, piece: QueuedPiece, lo: int, hi: int) -> None:
        """Sequences [lo, hi) of the piece; a piece is in a batch once, so more of one already in it
        (taken by an earlier pass) lengthens its slice."""
        first_row, num_rows = _rows(piece.batch, lo, hi)
        place = self._by_piece.get(id(piece))
        if place is None:
            self._by_piece[id(piece)] = len(self.slices)
            self.slices.append(Slice(piece, lo, hi, first_row, num_rows))
            piece.num_batches += 1
        else:
            before = self.slices[place]
            self.slices[place] = Slice(piece, before.lo, hi, before.first_row, before.num_rows + num_rows)
        self.tokens_left -= int(piece.batch.cu_seqlens[hi] - piece.batch.cu_seqlens[lo])
        # A late-interaction group's sequences count against the cap: each query is one more than its rows.
        self.rows_left -= hi - lo if piece.batch.is_late_interaction else num_rows


class PieceQueue:
    def __init__(self, max_batch_tokens: int, max_batch_seqs: int,
                 take_rows: Callable[[QueuedPiece], int | None] = lambda piece: 0, scheduling: str = "fair"):
        """`take_rows(piece)`: the first of the piece's vector rows, now taken, or None while
        they are not free. `scheduling`: one of SCHEDULING_POLICIES."""
        if scheduling not in SCHEDULING_POLICIES:
            raise ValueError(f"scheduling must be one of {', '.join(SCHEDULING_POLICIES)}; got {scheduling!r}")
        self.max_batch_tokens, self.max_batch_seqs = max_batch_tokens, max_batch_seqs
        self.take_rows = take_rows
        self.is_fair = scheduling == "fair"
        self._lines: dict[tuple[object, int], _Line] = {}  # in the order each line opened
        self._queued_tokens = 0
        self._last_class = (-1, False, False)  # the class of the latest batch: classes (models) take turns
        # Per class, its large requests' keys in turn order (deficit round robin, `_serve_in_turn`).
        self._turns: dict[tuple[int, bool, bool], collections.deque[tuple[object, int]]] = {}

    @property
    def queued_tokens(self) -> int:
        """Tokens waiting, not yet in a batch."""
        return self._queued_tokens

    @property
    def num_pieces(self) -> int:
        return sum(len(line.pieces) for line in self._lines.values())

    @property
    def num_requests(self) -> int:
        """Requests with inputs waiting."""
        return len(self._lines)

    def __bool__(self) -> bool:
        return bool(self._lines)

    @property
    def holds_large(self) -> bool:
        """Inputs of a request not marked small wait."""
        return any(not line.is_small for line in self._lines.values())

    @property
    def holds_small(self) -> bool:
        """Inputs of a request marked small wait."""
        return any(line.is_small for line in self._lines.values())

    def offer(self, piece: QueuedPiece) -> None:
        """Queue the piece behind its request's earlier ones."""
        line = self._lines.get(piece.key)
        if line is None:
            line = self._lines[piece.key] = _Line(piece.key, max(piece.message.weight, 1e-6),
                                                  is_small=piece.message.is_small)
        line.pieces.append(piece)
        tokens = piece.remaining_tokens
        line.queued_tokens += tokens
        self._queued_tokens += tokens

    def cancel(self, front_end: object, request: int) -> list[QueuedPiece]:
        """Drop what has not run of the request's pieces; returns those now settled (nothing of
        theirs on the device), which can be answered at once. The others are answered as their
        batches land."""
        line = self._lines.pop((front_end, request), None)
        if line is None:
            return []
        self._queued_tokens -= line.queued_tokens
        settled = []
        for piece in line.pieces:
            piece.is_cancelled = True
            if piece.is_settled:
                settled.append(piece)
        return settled

    def forget(self, front_end: object) -> list[QueuedPiece]:
        """A front end that is gone: drop every piece of its (as `cancel` does)."""
        settled = []
        for key in [key for key in self._lines if key[0] is front_end]:
            settled.extend(self.cancel(*key))
        return settled

    def cut(self, skip_small: bool = False, max_tokens: int | None = None) -> Batch | None:
        """The next batch, of the class (model) whose turn it is; None if nothing waits or nothing can go.
        `skip_small`: the small requests stay queued (engine/queue/express_lane.py runs them).
        `max_tokens`: a smaller budget for this batch (a GPU's express one, engine/queue/express_lane.py)."""
        open_lines = [line for line in self._lines.values() if not (skip_small and line.is_small)]
        for batch_class in self._classes_in_turn(open_lines):
            lines = [line for line in open_lines if line.batch_class == batch_class]
            filling = _Filling(min(max_tokens or self.max_batch_tokens, self.max_batch_tokens), self.max_batch_seqs,
                               batch_class)
            if self.is_fair:
                self._fill_fairly(lines, filling)
            else:
                for line in lines:
                    self._take(line, math.inf, filling)
            if (batch := self._close(lines, filling)) is not None:
                self._last_class = batch_class
                return batch
        return None

    def cut_small(self) -> Batch | None:
        """A batch of the small requests alone, in arrival order, of the class of the oldest of them;
        None if none waits (engine/queue/express_lane.py runs it between another batch's layers)."""
        small = [line for line in self._lines.values() if line.is_small]
        if not small:
            return None
        lines = [line for line in small if line.batch_class == small[0].batch_class]
        filling = _Filling(self.max_batch_tokens, self.max_batch_seqs, small[0].batch_class)
        for line in lines:
            self._take(line, math.inf, filling)
        return self._close(lines, filling)

    def _close(self, lines: list[_Line], filling: _Filling) -> Batch | None:
        """The batch filled from `lines`, which leave the queue once empty."""
        for line in lines:
            line.is_blocked = False
            if not line.pieces:
                del self._lines[line.key]
        if not filling.slices:
            return None
        parts = [s.packed() for s in filling.slices]
        return Batch(tuple(filling.slices), parts[0] if len(parts) == 1 else join_packed(*parts))

    def _classes_in_turn(self, lines: list[_Line]) -> list[tuple[int, bool, bool]]:
        """The batch classes of `lines` (in the order each opened), the one to serve next first: fair,
        the next after the latest batch's; fcfs, the oldest line's."""
        classes = list(dict.fromkeys(line.batch_class for line in lines))  # by each one's oldest line
        if not self.is_fair:
            return classes
        classes.sort()
        after = [c for c in classes if c > self._last_class]
        return after + [c for c in classes if c <= self._last_class]

    def _fill_fairly(self, lines: list[_Line], filling: _Filling) -> None:
        budget = filling.tokens_left
        demands = [min(line.queued_tokens, budget) for line in lines]
        shares = water_fill(demands, [line.weight for line in lines], budget)
        small = sorted((line for line, d, s in zip(lines, demands, shares) if d <= s), key=lambda l: l.queued_tokens)
        turns = self._turns_of(lines[0].batch_class, [line for line, d, s in zip(lines, demands, shares) if d > s])
        if turns:
            self._begin_turn(turns)
            # A sequence too long for the room the small requests leave goes first once its request's
            # turn has come and its credit covers it: small requests cannot hold it back for ever.
            first, room = turns[0], budget - sum(line.queued_tokens for line in small)
            if room < (length := _next_length(first)) <= first.credit:
                first.credit -= self._take(first, length, filling)
        # Those that ask for no more than an even share: all of it fits, in the next batch.
        for line in small:
            self._take(line, math.inf, filling)
        self._serve_in_turn(turns, filling)

    def _turns_of(self, batch_class: tuple[int, bool, bool], large: list[_Line]) -> collections.deque[_Line]:
        """The class's large requests in turn order: the one whose turn it is first, new ones last."""
        by_key = {line.key: line for line in large}
        before = self._turns.get(batch_class, ())
        order = [key for key in before if key in by_key] + [key for key in by_key if key not in before]
        self._turns[batch_class] = collections.deque(order)
        return collections.deque(by_key[key] for key in order)

    def _begin_turn(self, turns: collections.deque[_Line]) -> None:
        """The first in `turns` gets its quantum, where its turn has not begun: a batch's budget times
        its weight against the heaviest's."""
        line = turns[0]
        if not line.is_in_turn:
            line.credit = min(line.credit + self.max_batch_tokens * line.weight / max(o.weight for o in turns),
                              MAX_CREDIT_BATCHES * self.max_batch_tokens)
            line.is_in_turn = True

    def _serve_in_turn(self, turns: collections.deque[_Line], filling: _Filling) -> None:
        """Deficit round robin over the large requests: each fills the room of its turn with its own
        sequences, from its credit; a turn goes on into the next batch while credit is left, and what
        whole sequences leave of it carries into the request's next turn. So bulk requests advance
        together, about a batch apart, and a batch holds few of them: one of many slivers costs the
        engine more to join and to hand back. Room that whole sequences leave at the end goes to
        any of them, against credit to come."""
        if not turns:
            return
        batch_class, idle = turns[0].batch_class, 0
        while filling.has_room and idle < len(turns):
            self._begin_turn(turns)
            line = turns[0]
            got = self._take(line, line.credit, filling)
            line.credit -= got
            idle = 0 if got else idle + 1
            if self._may_send(line) and line.credit >= _next_length(line):
                break  # the room, not its credit, ran out: its turn goes on
            line.is_in_turn = False
            turns.rotate(-1)
            self._turns[batch_class].rotate(-1)
        for line in turns:
            if not filling.has_room:
                break
            line.credit -= self._take(line, math.inf, filling)

    @staticmethod
    def _may_send(line: _Line) -> bool:
        return bool(line.pieces) and not line.is_blocked

    def _take(self, line: _Line, allowance: float, filling: _Filling) -> int:
        """Whole sequences of the line's pieces, in order, within `allowance` tokens and the batch's room
        (one sequence always goes into an empty batch); the tokens taken."""
        taken = 0
        while line.pieces and not line.is_blocked and filling.has_room:
            piece = line.pieces[0]
            if piece.batch_class != filling.batch_class:  # the request's next inputs go into a batch of their kind
                break
            batch, lo = piece.batch, piece.next_seq
            limit = min(allowance - taken, filling.tokens_left)
            hi = _fit(batch, lo, int(limit) if limit < math.inf else filling.tokens_left, filling.rows_left)
            if hi == lo:
                if filling.slices or allowance < math.inf:
                    break
                hi = _next_cut(batch, lo)  # one sequence (group) always fits an empty batch: the front end cut it so
            if piece.first_row is None:
                piece.first_row = self.take_rows(piece)
                if piece.first_row is None:  # its front end has not read earlier vectors yet
                    line.is_blocked = True
                    break
            filling.add(piece, lo, hi)
            taken += int(batch.cu_seqlens[hi] - batch.cu_seqlens[lo])
            piece.next_seq = hi
            if not piece.is_fully_cut:
                break
            line.pieces.popleft()
        line.queued_tokens -= taken
        self._queued_tokens -= taken
        return taken


def _next_length(line: _Line) -> int:
    """The tokens of the line's next sequence (late-interaction group)."""
    piece = line.pieces[0]
    cu, lo = piece.batch.cu_seqlens, piece.next_seq
    return int(cu[_next_cut(piece.batch, lo)] - cu[lo])


def _next_cut(batch: PackedBatch, lo: int) -> int:
    """The first place after sequence `lo` the batch may be cut: the next sequence, or the end of the
    late-interaction group `lo` opens."""
    if not batch.is_late_interaction:
        return lo + 1
    starts = batch.group_starts()
    later = starts[starts > lo]
    return int(later[0]) if len(later) else batch.num_seqs


def _fit(batch: PackedBatch, lo: int, max_tokens: int, max_rows: int) -> int:
    """The largest hi such that sequences [lo, hi) hold at most max_tokens tokens and max_rows vectors;
    for late-interaction groups, whole groups within max_rows sequences (their graph key counts them)."""
    cu = batch.cu_seqlens
    hi = int(np.searchsorted(cu, int(cu[lo]) + max_tokens, side="right")) - 1
    if batch.is_late_interaction:
        starts = np.append(batch.group_starts(), batch.num_seqs)
        cuts = starts[(starts >= lo) & (starts <= min(hi, lo + max_rows))]
        return int(cuts[-1]) if len(cuts) else lo
    if batch.cu_segments is None:
        return max(lo, min(hi, lo + max_rows))
    cs = batch.cu_segments
    by_rows = int(np.searchsorted(cs, int(cs[lo]) + max_rows, side="right")) - 1
    return max(lo, min(hi, by_rows))


def _rows(batch: PackedBatch, lo: int, hi: int) -> tuple[int, int]:
    if batch.cu_segments is None:
        return lo, hi - lo
    return int(batch.cu_segments[lo]), int(batch.cu_segments[hi] - batch.cu_segments[lo])
