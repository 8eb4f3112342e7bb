"""EngineLink: a front end's connection to one engine, through an arena and two pipes.

The supervisor makes the arena and the pipes (server/processes/engine_host.py) and hands the front
end its ends (`EngineEnds`). A piece is written into the arena's ints (space taken by this
front end's allocator), announced by a Piece message, and answered once: its vectors are in
the rows the engine gave it (PieceDone: they are copied out and the rows given back with a
Release message) or it was dropped (the request was cancelled). Only then are its ints given
back. While the arena is full, pieces wait here, and freed space goes first to the piece
whose request has the fewest tokens in the engine for its weight: a one-text query passes
every waiting piece of a bulk request, and bulk requests take turns, as the engine's queue
shares its batches. With fair scheduling a small request's piece first tries the arena's room
kept for small ones (engine/contract/arena.py), so that it need not wait at all. Replies are read
on the event loop (`add_reader`, no thread). The engine's exit, for whatever reason, shows
as the reply pipe's end of file: what this front end had on it fails, and it leaves the
rotation; where the supervisor restarts the engine, a new link to the new process takes its
place (server/links/reattach.py).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

from rose_embed.engine.contract import messages
from rose_embed.engine.contract.arena import Allocator, Arena
from rose_embed.engine.contract.board import EngineBoard
from rose_embed.engine.contract.interface import PieceVectors
from rose_embed.engine.contract.batch import PackedBatch
from rose_embed.server.links.engine_ends import EngineEnds
from rose_embed.server.processes.pids import is_running


class EngineLoadError(RuntimeError):
    """An engine that failed to load, died, or did not warm up in time; the message says which."""


class EngineDiedError(EngineLoadError):
    """The engine's process ended before it was warm (killed, crashed): the supervisor restarts it."""


class EngineLostError(RuntimeError):
    """The engine can compute nothing more (its process died, or it was retired as stuck)."""


class PieceFailedError(RuntimeError):
    """The engine could not compute the piece's batch; it serves on."""


@dataclass(eq=False)
class _Pending:
    future: asyncio.Future
    offset: int
    num_ints: int
    num_rows: int
    num_tokens: int
    width: int  # the columns of each row its model fills


@dataclass(eq=False)
class _Waiter:
    """A piece waiting for arena ints."""

    num_ints: int
    future: asyncio.Future  # of the offset
    request: int
    weight: float
    num_tokens: int
    number: int  # its place in arrival order, among equals
    is_small: bool


class EngineLink:
    """One front end's link to one engine."""

    def __init__(self, ends: EngineEnds, can_retire: bool = True, is_fair: bool = True):
        """`can_retire`: False for an engine in a thread of this process, which cannot be killed
        when it is stuck. (How an engine process ended is the supervisor's to tell: it waits for it.)
        `is_fair`: waiting pieces get arena room as the module says (else in arrival order, as the
        queue's fcfs scheduling takes them)."""
        self.is_fair = is_fair
        self.index, self.device, self.pid = ends.index, ends.device, ends.pid
        self.can_retire = can_retire
        self.arena = Arena.attach(ends.arena, ends.layout)
        self.board = EngineBoard.attach(ends.board)
        self._tasks, self._replies = ends.tasks, ends.replies
        layout = ends.layout
        self._ints = Allocator(layout.num_ints - layout.reserved_ints)
        self._small_ints = Allocator(layout.reserved_ints, first=layout.num_ints - layout.reserved_ints)
        self._pending: dict[tuple[int, int], _Pending] = {}
        self._unanswered: collections.Counter[int] = collections.Counter()  # pending pieces by request
        self._request_tokens: collections.Counter[int] = collections.Counter()  # ... and their tokens
        self._waiting: list[_Waiter] = []  # pieces waiting for arena ints
        self._arrivals = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._on_lost: Callable[[EngineLink], None] | None = None
        self.out_reason: str | None = None  # set once the engine is out of rotation (this link for good)
        self.dtype: str | None = None
        self.attention_table: list[tuple[str, str, str]] = []
        # Per served model, as the engine reports once warm: (the width of its vectors, its weights' bytes).
        self.models: list[tuple[int, int]] = []
        # What the engine measured at warm-up: a batch's token budget, and its tokens per second at it.
        self.max_batch_tokens: int | None = None
        self.warm_tokens_per_second = 0.0
        self.tokens_outstanding = 0  # of this front end's pieces, not yet answered
        self.num_pieces = 0
        self._last_board: dict[str, float] = {}
        # When this front end last heard from the engine while it had pieces there (or sent the first
        # of them): the watchdog's measure of an engine gone silent (server/links/stall_watch.py).
        self.heard_at = 0.0

    @property
    def is_serving(self) -> bool:
        return self.out_reason is None

    def wait_ready(self, timeout: float) -> None:
        """Block (off the event loop) until the engine is warm; raise if it failed or died meanwhile."""
        deadline = time.monotonic() + timeout
        while not self._replies.poll(0.25):  # a process that died shows as EOF here, and recv says so
            if time.monotonic() > deadline:
                raise EngineLoadError(f"engine {self.index} on {self.device} was not ready after {timeout:.0f} s")
            # No EOF from one that died before it took its ends: the supervisor still holds a copy for it.
            if self.can_retire and not is_running(self.pid):
                raise self._died()
        try:
            reply = messages.decode_to_front_end(self._replies.recv_bytes())
        except EOFError:
            raise self._died() from None
        if not isinstance(reply, messages.Ready):
            raise EngineLoadError(f"engine {self.index} on {self.device} failed to load: {reply.why}")
        self.pid, self.dtype, self.attention_table = reply.pid, reply.dtype, [tuple(r) for r in reply.attention]
        self.models = [tuple(m) for m in reply.models]
        self.max_batch_tokens, self.warm_tokens_per_second = reply.max_batch_tokens, reply.tokens_per_second

    def _died(self) -> EngineDiedError:
        return EngineDiedError(f"engine {self.index} on {self.device} did not start: {self._exit_reason()}")

    def attach(self, loop: asyncio.AbstractEventLoop, on_lost: Callable[[EngineLink], None]) -> None:
        """Start reading replies on `loop`; `on_lost` runs there if the engine goes out."""
        self._loop, self._on_lost = loop, on_lost
        loop.add_reader(self._replies.fileno(), self._read_replies)

    def load(self) -> float:
        """Tokens ahead of a new piece: the engine's whole queue, and this front end's pieces not yet answered."""
        return self.board["queued_tokens"] + self.tokens_outstanding

    def has_pending(self, request: int) -> bool:
        return request in self._unanswered

    def speed(self) -> float:
        """The engine's tokens per second: what warm-up measured at full batches, or more where its latest
        batches ran faster (small batches of queries alone run slower: they say little of what it can do)."""
        return max(self.board["busy_tokens_per_second"], self.warm_tokens_per_second)

    async def compute(self, request: int, index: int, opens_request: bool, batch: PackedBatch,
                      figures: messages.PieceFigures, model: int = 0, weight: float = 1.0,
                      is_small: bool = False) -> PieceVectors:
        """`figures`: the batch's sizes (messages.piece_figures), read once by the caller; `model`: which
        served model computes it; `weight`: the request's share against others'; `is_small`: the whole
        request is small (on a CPU it may run between a larger batch's layers)."""
        if self.out_reason is not None:
            raise EngineLostError(self.out_reason)
        num_tokens = figures.num_tokens
        offset = await self._take(figures.num_ints, request, weight, num_tokens, is_small)
        if self.out_reason is not None:  # it went out while the piece waited: nothing would answer it
            raise EngineLostError(self.out_reason)
        self.arena.write_piece(offset, batch)
        future = self._loop.create_future()
        if not self.tokens_outstanding:
            self.heard_at = time.monotonic()
        width = self.models[model][0] if model < len(self.models) else self.arena.layout.dim
        self._pending[(request, index)] = _Pending(future, offset, figures.num_ints, figures.num_outputs, num_tokens,
                                                   width)
        self._unanswered[request] += 1
        self.tokens_outstanding += num_tokens
        self._send(messages.Piece(request, index, offset, num_tokens, figures.num_seqs, figures.max_seqlen,
                                  figures.num_outputs, figures.is_segmented, opens_request, model, weight, is_small,
                                  figures.image_size))
        self.num_pieces += 1
        return await future

    async def _take(self, num_ints: int, request: int, weight: float, num_tokens: int, is_small: bool) -> int:
        """Arena ints for a piece, waiting while the arena is full (see the module's docstring).
        Its tokens count as its request's in the engine from the moment the ints are its."""
        offset = self._small_ints.take(num_ints) if is_small and self.is_fair else None
        if offset is None and not self._waiting:
            offset = self._ints.take(num_ints)
        if offset is not None:
            self._request_tokens[request] += num_tokens
            return offset
        future = self._loop.create_future()
        self._waiting.append(_Waiter(num_ints, future, request, weight, num_tokens, next(self._arrivals), is_small))
        try:
            return await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled() and future.exception() is None:
                self._give_back_ints(future.result(), num_ints)  # given to a piece that no longer wants it
                self._forget_tokens(request, num_tokens)
                self._wake_waiters()
            raise

    def _wake_waiters(self) -> None:
        """Hand freed ints to the waiting pieces, the one whose request has the least in the engine for
        its weight first, while that one fits (a large piece is not passed for ever by smaller ones)."""
        self._waiting = [w for w in self._waiting if not w.future.done()]  # their requests went away
        while self._waiting:
            tokens = self._request_tokens
            waiter = (min(self._waiting, key=lambda w: (tokens[w.request] / w.weight, w.number)) if self.is_fair
                      else self._waiting[0])
            offset = self._small_ints.take(waiter.num_ints) if waiter.is_small and self.is_fair else None
            if offset is None:
                offset = self._ints.take(waiter.num_ints)
            if offset is None:
                return
            self._waiting.remove(waiter)
            self._request_tokens[waiter.request] += waiter.num_tokens
            waiter.future.set_result(offset)

    def _give_back_ints(self, offset: int, num_ints: int) -> None:
        (self._small_ints if offset >= self._small_ints.first else self._ints).give_back(offset, num_ints)

    def _forget_tokens(self, request: int, num_tokens: int) -> None:
        tokens = self._request_tokens
        tokens[request] -= num_tokens
        if tokens[request] <= 0:
            del tokens[request]

    def cancel(self, request: int) -> None:
        """The request is over: the engine drops what of it has not run (its answers free the space)."""
        self._send(messages.Cancel(request))

    def _send(self, message) -> None:
        if self.out_reason is None:
            try:
                self._tasks.send_bytes(messages.encode(message))
            except OSError:
                self._lost(self._exit_reason())

    def _read_replies(self) -> None:
        read: list[tuple[int, int]] = []  # rows copied out, given back in one message
        self.heard_at = time.monotonic()
        try:
            while self._replies.poll():
                self._on_reply(messages.decode_to_front_end(self._replies.recv_bytes()), read)
        except (EOFError, OSError):
            self._lost(self._exit_reason())
        if read:
            self._send(messages.Release(read))

    def _on_reply(self, reply, read: list[tuple[int, int]]) -> None:
        pending = self._pending.pop((reply.request, reply.index), None)
        if pending is None:
            self.retire(f"it answered a piece it was not given ({reply.request}, {reply.index})")
            return
        self._unanswered[reply.request] -= 1
        if not self._unanswered[reply.request]:
            del self._unanswered[reply.request]
        future = pending.future
        if isinstance(reply, messages.PieceDone) and reply.error is None:
            # Copied out, so that the rows can be given back at once (the request may be gone).
            vectors = self.arena.rows[reply.first_row : reply.first_row + pending.num_rows, : pending.width].copy()
            read.append((reply.first_row, pending.num_rows))
            if not future.done():
                future.set_result(PieceVectors(vectors, reply.started, reply.finished))
        elif not future.done():
            if isinstance(reply, messages.PieceDone):
                future.set_exception(PieceFailedError(f"engine {self.index} on {self.device}: {reply.error}"))
            else:
                future.cancel()
        self._give_back(pending, reply.request)

    def _give_back(self, pending: _Pending, request: int) -> None:
        self._give_back_ints(pending.offset, pending.num_ints)
        self.tokens_outstanding -= pending.num_tokens
        self._forget_tokens(request, pending.num_tokens)
        self._wake_waiters()

    def _exit_reason(self) -> str:
        """Why the engine is gone, as /health and the errors say it."""
        return f"its process (pid {self.pid}) closed its pipe" if self.can_retire else "its thread ended"

    def fail_pending(self, error: BaseException) -> None:
        """Fail every piece waiting on this engine (a stuck engine that cannot be killed)."""
        for pending in self._pending.values():
            if not pending.future.done():
                pending.future.set_exception(error)

    def _lost(self, reason: str) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._replies.fileno())
        first = self.out_reason is None
        if first:
            self.out_reason = reason
        self.fail_pending(EngineLostError(f"engine {self.index} on {self.device}: {reason}"))
        self._pending.clear()
        self._unanswered.clear()
        self._request_tokens.clear()
        waiting, self._waiting = self._waiting, []
        for waiter in waiting:  # pieces waiting for space: the engine is gone
            if not waiter.future.done():
                waiter.future.set_exception(EngineLostError(f"engine {self.index} on {self.device}: {reason}"))
        if first and self._on_lost is not None and reason != "stopped":
            self._on_lost(self)

    def mark_out(self, reason: str) -> None:
        """Out of rotation, its process already gone: what waits on it fails."""
        self._lost(reason)

    def retire(self, reason: str) -> None:
        """Out of rotation now; the process is killed (a stuck kernel would never return)."""
        self._lost(reason)
        if self.can_retire:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def stop_serving(self) -> None:
        """On the event loop: leave the rotation quietly (the server is going down), fail what is
        in flight and tell the engine this front end is done."""
        if self.out_reason is None:
            self._send(messages.Goodbye())
            self._lost("stopped")

    def shutdown(self) -> None:
        """Done with the engine: close the pipes and let go of the shared memory."""
        if self._tasks.closed:
            return
        if self.out_reason is None:
            self.stop_serving()
        self._tasks.close()
        self._replies.close()
        self.arena.close()
        self._last_board = self.board.snapshot()
        self.board.close()

    def board_histogram(self, kind: str) -> tuple[list[tuple[str, float]], float]:
        """The engine's histogram of batch `kind` ("tokens" or "sequences"); empty once shut down."""
        return ([], 0.0) if self._tasks.closed else self.board.histogram(kind)

    def board_snapshot(self) -> dict[str, float]:
        """The engine's board as it reads now (as it last read, once this link is shut down)."""
        return self._last_board if self._tasks.closed else self.board.snapshot()

    def describe(self) -> dict:
        """The engine as /health lists it."""
        state = {"index": self.index, "device": self.device, "pid": self.pid,
                 "state": "serving" if self.is_serving else "out"}
        if self.out_reason is not None:
            state["reason"] = self.out_reason
        board = self.board_snapshot()
        state.update(batches=int(board.get("batches", 0)), tokens=int(board.get("tokens", 0)),
                     queued_tokens=int(board.get("queued_tokens", 0)), is_busy=bool(board.get("busy_since", 0)),
                     pieces_sent=self.num_pieces, weights_bytes=[weights for _, weights in self.models])
        return state
