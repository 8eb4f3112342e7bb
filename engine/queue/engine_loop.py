"""The engine's loop: every front end's pieces through one queue (Tulip) onto the device's models (ROSE).

One thread (the caller's) owns the queue and the device: it reads every front end's pipe
as messages come (`connection.wait` over all of them), queues the pieces, and launches a
batch cut from the queue whenever the device has room. On a GPU two device batches are kept in
flight at most, one computing and one queued behind it, the second launched only shortly before
the first is due to end (engine/queue/launch_clock.py): what arrives meanwhile waits in the queue
and goes into the next batch, which is cut as late as the device allows. On the CPU a batch
computes inside its launch, on this thread, so one is in flight: a second launched at once would
compute before the first one's pieces are answered or a cancel is read. A second thread
waits for each batch's vectors, writes them into the rows of the pieces they belong to and
tells the first thread, which answers each piece once nothing of it is left to run.

Every model the server serves has its own engine here (its weights, graphs and static
buffers); a piece names its model, and a batch, cut by the queue, holds one model's pieces.

A batch that fails fails its pieces; one that held several pieces is run again piece by
piece first, so that only the piece that holds the fault fails. The loop ends once the
control pipe is closed and every front end has said goodbye or gone.

In the server this runs in an engine process of its own (engine/queue/engine_process.py);
an in-process engine (tests, programs that embed the app) runs it in a thread.
"""

from __future__ import annotations

import collections
import os
import queue
import threading
import time
from dataclasses import dataclass
from multiprocessing import Pipe
from multiprocessing.connection import Connection, wait

from rose_embed.engine.contract import messages
from rose_embed.engine.contract.arena import Allocator, Arena
from rose_embed.engine.contract.board import EngineBoard
from rose_embed.engine.contract.config import EngineConfig
from rose_embed.engine.contract.memory import HeapTrimmer
from rose_embed.engine.contract.messages import Attach, Cancel, Goodbye, Piece, Release
from rose_embed.engine.queue.busy_rate import BusyRate
from rose_embed.engine.queue.express_lane import ExpressLane
from rose_embed.engine.queue.launch_clock import LaunchClock
from rose_embed.engine.queue.piece_queue import Batch, PieceQueue, QueuedPiece

# Device batches launched and not yet read back: on a GPU one computing and one queued behind it
# keep the device busy across the host's gap between them (the second launched only shortly before
# the first ends). A CPU computes each batch as it is launched.
DEVICE_BATCHES_IN_FLIGHT = 2
CPU_BATCHES_IN_FLIGHT = 1
_RATE_WINDOW_S = 10.0
_MEMORY_EVERY_S = 0.5  # torch.cuda.memory_allocated builds the allocator's whole statistics dict


@dataclass(eq=False)
class FrontEnd:
    """One attached front end, as the engine sees it."""

    index: int
    arena: Arena
    tasks: Connection
    replies: Connection
    rows: Allocator  # the arena's vector rows: this engine hands them out, the front end gives them back

    def send(self, message) -> bool:
        try:
            self.replies.send_bytes(messages.encode(message))
            return True
        except OSError:  # that front end is gone
            return False


@dataclass(eq=False)
class _Landed:
    """The readback thread's word on a batch: its vectors are in the pieces' rows (error None), or not."""

    batch: Batch
    error: str | None
    finished: float


class EngineLoop:
    def __init__(self, engines, control: Connection | None, board: EngineBoard, budget: tuple[int, int],
                 front_ends: tuple[Attach, ...] = (), scheduling: str = "fair"):
        """`engines`: one engine per served model, in the server's order (a single engine: one model).
        `budget`: a batch's most tokens and vectors. `control`: where the supervisor attaches front
        ends (None: only `front_ends`, given now). `scheduling`: how the queue fills a batch
        (engine/queue/piece_queue.py's SCHEDULING_POLICIES)."""
        self.engines = list(engines) if isinstance(engines, (list, tuple)) else [engines]
        self.engine = self.engines[0]  # the device, dtype and attention table are the first model's
        self.control, self.board = control, board
        self.queue = PieceQueue(*budget, take_rows=_take_rows, scheduling=scheduling)
        self._is_blocked = False  # the queue's head waits for rows its front end has not given back
        self.front_ends: dict[Connection, FrontEnd] = {}  # by task pipe
        engine = self.engine
        self._ready = messages.Ready(os.getpid(), str(engine.dtype).removeprefix("torch."), _attention_table(engine),
                                     [(e.spec.embedding_dim, weights_bytes(e)) for e in self.engines],
                                     budget[0], float(getattr(engine, "tokens_per_second", 0.0)))
        self._launched: queue.SimpleQueue = queue.SimpleQueue()
        self._landed: queue.SimpleQueue = queue.SimpleQueue()
        # The readback thread's word that a batch landed wakes this thread's wait on the pipes.
        self.wake_reader, self._wake_writer = Pipe(duplex=False)
        self.num_in_flight = 0
        self._is_cpu = getattr(getattr(engine, "device", None), "type", "cpu") == "cpu"
        self._max_in_flight = CPU_BATCHES_IN_FLIGHT if self._is_cpu else DEVICE_BATCHES_IN_FLIGHT
        self._clock = LaunchClock(float(getattr(engine, "tokens_per_second", 0.0)))
        self._reader = threading.Thread(target=self._read_back, name="rose-readback", daemon=True)
        self._closing: list[FrontEnd] = []  # said goodbye: closed once no batch is being launched
        # On the CPU, small requests run between the layers of the batch in flight; on a GPU, batches shrink
        # to the express budget while they come (fair scheduling only).
        express = [e.express_batch_tokens for e in self.engines if getattr(e, "express_batch_tokens", 0)]
        self.express = ExpressLane(self, is_on=self._is_cpu and self.queue.is_fair,
                                   budget_tokens=min(express) if express and not self._is_cpu and self.queue.is_fair
                                   else 0)
        if self.express.is_on:
            for one in self.engines:
                interleave = getattr(one, "interleave", None)
                if interleave is not None:
                    interleave(self.express)
        for attach in front_ends:
            self._attach(attach)

    def run(self) -> None:
        self._reader.start()
        try:
            while self.control is not None or self.front_ends:
                self._close_front_ends()
                may_launch = self.queue and self.num_in_flight < self._max_in_flight and not self._is_blocked
                ready = wait([*self.front_ends, self.wake_reader, *([self.control] if self.control else [])],
                             self._seconds_to_launch() if may_launch else None)
                for conn in ready:
                    if conn is self.control:
                        self._on_control()
                    elif conn is self.wake_reader:
                        self.on_landed()
                    else:
                        self.on_messages(self.front_ends[conn])
                while (self.queue and self.num_in_flight < self._max_in_flight and not self._is_blocked
                       and self._seconds_to_launch() == 0):
                    batch = self.express.cut()
                    if batch is None:
                        self._is_blocked = True  # until a front end gives rows back
                    else:
                        self.launch(batch)
                self._publish_queue()
            self._close_front_ends()
            while self.num_in_flight:  # the front ends are gone; let the device finish
                wait([self.wake_reader])
                self.on_landed()
        finally:
            self._launched.put(None)
            self._reader.join(10)

    # -- messages --------------------------------------------------------------------------

    def _on_control(self) -> None:
        try:
            attach: Attach = self.control.recv()
        except (EOFError, OSError):
            self.control = None  # the supervisor is done: serve the front ends left, then end
            return
        self._attach(attach)

    def _attach(self, attach: Attach) -> None:
        front_end = FrontEnd(attach.front_end, Arena.attach(attach.arena, attach.layout), attach.tasks,
                             attach.replies, Allocator(attach.layout.num_rows))
        if front_end.send(self._ready):
            self.front_ends[front_end.tasks] = front_end

    def on_messages(self, front_end: FrontEnd) -> None:
        """Everything the front end has sent: a cancel that came behind a piece is seen before the
        next batch is cut, and the pieces that wait together are joined."""
        while front_end.tasks in self.front_ends:
            try:
                if not front_end.tasks.poll():
                    return
                message = messages.decode_to_engine(front_end.tasks.recv_bytes())
            except (EOFError, OSError):
                message = Goodbye()  # that front end is gone
            self._on_message(front_end, message)

    def _on_message(self, front_end: FrontEnd, message) -> None:
        self._is_blocked = False
        if isinstance(message, Release):
            for first_row, num_rows in message.rows:
                front_end.rows.give_back(first_row, num_rows)
        elif isinstance(message, Piece):
            self._on_piece(front_end, message)
        elif isinstance(message, Cancel):
            self._answer_settled(self.queue.cancel(front_end, message.request))
        else:
            del self.front_ends[front_end.tasks]
            self._answer_settled(self.queue.forget(front_end))
            self._close_when_answered(front_end)

    def _on_piece(self, front_end: FrontEnd, message: Piece) -> None:
        try:
            if not 0 <= message.model < len(self.engines):
                raise ValueError(f"no model {message.model} here; this engine serves {len(self.engines)}")
            batch = front_end.arena.read_piece(message.offset, message.num_tokens, message.num_seqs, message.max_seqlen,
                                               message.is_segmented, message.image_size)
        except Exception as exc:  # a piece that cannot be read fails alone
            front_end.send(messages.PieceDone(message.request, message.index, f"{type(exc).__name__}: {exc}", -1, 0.0,
                                              0.0))
            return
        if message.is_small:
            self.express.saw_small()
        self.queue.offer(QueuedPiece(front_end, message, batch))

    def _answer_settled(self, pieces: list[QueuedPiece]) -> None:
        for piece in pieces:
            self._answer(piece)

    def _answer(self, piece: QueuedPiece) -> None:
        message, front_end = piece.message, piece.front_end
        is_read = not piece.is_cancelled and piece.error is None  # the front end reads its rows, then gives them back
        if not is_read and piece.first_row is not None:
            front_end.rows.give_back(piece.first_row, message.num_outputs)
            self._is_blocked = False
        if piece.is_cancelled and piece.error is None:
            self.board.add("pieces_cancelled", 1)
            front_end.send(messages.Cancelled(message.request, message.index))
        else:
            first_row = piece.first_row if is_read else -1
            front_end.send(messages.PieceDone(message.request, message.index, piece.error, first_row, piece.started,
                                              piece.finished))

    def _close_when_answered(self, front_end: FrontEnd) -> None:
        """A front end that said goodbye: its ends close once nothing of its is on the device. Not
        before the batch being launched (the express lane reads messages inside a launch) is handed
        to the readback thread, which writes that batch's rows first."""
        self._closing.append(front_end)

    def _close_front_ends(self) -> None:
        for front_end in self._closing:
            self._launched.put(front_end)
        self._closing.clear()

    # -- the device ------------------------------------------------------------------------

    def full_batch_seconds(self) -> float:
        """A full batch's time on the device, as the batches that landed measure it."""
        return self.queue.max_batch_tokens * self._clock.seconds_per_token

    def _seconds_to_launch(self) -> float:
        """How long the next batch may wait: on a GPU, until the work in flight is about to end."""
        return 0.0 if self._is_cpu else self._clock.seconds_to_launch(time.monotonic())

    def launch(self, batch: Batch) -> None:
        started = time.monotonic()
        if self.num_in_flight == 0:
            self.board["busy_since"] = started
        for piece in batch.pieces:
            if not piece.started:
                piece.started = started
        self.num_in_flight += 1
        try:
            with self.express.interrupting(batch):
                lazy = self.engines[batch.model].execute_packed(batch.packed)
        except Exception as exc:  # this batch fails; the engine serves on (SystemExit ends the loop)
            self.num_in_flight -= 1
            self._fail(batch, f"{type(exc).__name__}: {exc}")
            return
        self._clock.launched(batch.packed.num_tokens, started)
        self._launched.put((batch, lazy, started))

    def _fail(self, batch: Batch, error: str) -> None:
        """A batch of several pieces runs again piece by piece, so that only the faulty one fails
        (and only a batch that fails alone counts as failed)."""
        if len(batch.slices) == 1:
            self.board.add("batches_failed", 1)
            self._settle(batch, error, time.monotonic())
            return
        for one in batch.slices:
            self.launch(Batch((one,), one.packed()))

    def on_landed(self) -> None:
        self.wake_reader.recv_bytes()
        landed: _Landed = self._landed.get()
        self.num_in_flight -= 1
        self._clock.landed(landed.finished)
        self.board["busy_since"] = time.monotonic() if self.num_in_flight else 0.0
        if landed.error is not None:
            self._fail(landed.batch, landed.error)
        else:
            self._settle(landed.batch, None, landed.finished)

    def _settle(self, batch: Batch, error: str | None, finished: float) -> None:
        for piece in dict.fromkeys(batch.pieces):  # a piece is in a batch once, unless rerun alone
            piece.num_landed += 1
            piece.finished = max(piece.finished, finished)
            if error is not None and piece.error is None:
                piece.error = error
            if piece.is_settled:
                self._answer(piece)

    def _publish_queue(self) -> None:
        self.board["queued_tokens"] = self.queue.queued_tokens
        self.board["queued_pieces"] = self.queue.num_pieces
        self.board["queued_requests"] = self.queue.num_requests

    def _read_back(self) -> None:
        """The second thread: each batch's vectors into its pieces' rows, in launch order."""
        trimmer = HeapTrimmer() if self._is_cpu else None
        recent: collections.deque[tuple[float, int]] = collections.deque()
        busy = BusyRate()
        memory_read = float("-inf")
        while (item := self._launched.get()) is not None:
            if isinstance(item, FrontEnd):  # launched before: everything of its has landed
                item.tasks.close()
                item.replies.close()
                item.arena.close()
                continue
            batch, lazy, started = item
            error = None
            try:
                rows = lazy.wait()
                first = 0
                for one in batch.slices:
                    row = one.piece.first_row + one.first_row
                    # Rows fit the widest model; a narrower one fills the first columns of each.
                    arena_rows = one.piece.front_end.arena.rows[row : row + one.num_rows]
                    arena_rows[:, : rows.shape[1]] = rows[first : first + one.num_rows]
                    first += one.num_rows
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
            finished = time.monotonic()
            if error is None:
                packed = batch.packed
                self.board.record_batch(packed.num_tokens, packed.num_seqs, finished - started)
                recent.append((finished, packed.num_tokens))
                while recent and finished - recent[0][0] > _RATE_WINDOW_S:
                    recent.popleft()
                self.board["tokens_per_second"] = sum(n for _, n in recent) / _RATE_WINDOW_S
                self.board["busy_tokens_per_second"] = busy.record(packed.num_tokens, started, finished)
            self._record_runner()
            if finished - memory_read >= _MEMORY_EVERY_S:
                memory_read = finished
                self._record_memory()
            self._landed.put(_Landed(batch, error, finished))
            self._wake_writer.send_bytes(b"")
            if trimmer is not None:
                trimmer.maybe_trim()

    def _record_runner(self) -> None:
        runners = [getattr(engine, "runner", engine) for engine in self.engines]  # a test's fake counts for itself
        for field, name in (("graph_replays", "num_graph_replays"), ("eager_runs", "num_eager_runs"),
                            ("capture_failures", "num_capture_failures")):
            self.board[field] = sum(getattr(runner, name, 0) for runner in runners)

    def _record_memory(self) -> None:
        device = getattr(self.engine, "device", None)
        if getattr(device, "type", None) == "cuda":
            import torch

            self.board["device_allocated"] = torch.cuda.memory_allocated(device)
            self.board["device_reserved"] = torch.cuda.memory_reserved(device)


def queue_budget(engines: list, config: EngineConfig) -> tuple[int, int]:
    """The queue's batch budget: the smallest any model's warm-up chose (each batch's time stays
    bounded whichever model it serves), within the configured one."""
    tokens = min((getattr(e, "max_batch_tokens", config.max_batch_tokens) for e in engines),
                 default=config.max_batch_tokens)
    return min(tokens, config.max_batch_tokens), config.max_batch_seqs


def _take_rows(piece: QueuedPiece) -> int | None:
    return piece.front_end.rows.take(piece.batch.num_outputs)


def weights_bytes(engine) -> int:
    """What the engine's model holds in device memory as weights (0 for a test's fake)."""
    return int(getattr(engine, "weights_bytes", 0))


def _attention_table(engine) -> list[tuple[str, str, str]]:
    """The attention backend per class of batch, fixed at warm-up (for /metrics)."""
    table = getattr(getattr(engine, "runner", None), "attention_table", None)
    return [tuple(row) for row in table()] if table is not None else []
