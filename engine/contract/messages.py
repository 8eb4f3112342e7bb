"""The messages between a front end and an engine process, as typed structures.

A front end sends its pieces: a piece is a few already-tokenized inputs of one request,
written into the shared-memory arena the two share (engine/contract/arena.py); the message says where.
The engine's queue (engine/queue/) batches the pieces of every front end, sharing each batch
among the requests that wait, and answers each piece once, when its vectors are in the arena (or why they never
will be). Token ids and vectors never travel in a message.

Messages go over a pipe as msgpack (`encode` / `decode`); the set-up of a front end, which
carries the pipes themselves, goes over the engine's control pipe as `Attach`.
"""

from __future__ import annotations

from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, NamedTuple

import msgspec

from rose_embed.engine.contract.batch import image_floats

if TYPE_CHECKING:
    from rose_embed.engine.contract.arena import ArenaLayout
    from rose_embed.engine.contract.batch import PackedBatch


@dataclass
class Attach:
    """Supervisor -> engine, over its control pipe (pickled: it carries the pipes themselves):
    serve this front end, through this arena and these two pipes."""

    front_end: int
    arena: str  # the shared-memory block's name
    layout: ArenaLayout
    tasks: Connection  # the engine reads the front end's messages here
    replies: Connection  # ... and answers here


class Piece(msgspec.Struct, tag=True, array_like=True):
    """Front end -> engine: a piece to compute, lying in the arena's ints at `offset`: input_ids [num_tokens], positions [num_tokens],
    cu_seqlens [num_seqs + 1], then, where the piece pools several vectors per sequence,
    segment_ids [num_tokens] and cu_segments [num_seqs + 1] (engine/contract/batch.py's PackedBatch), or,
    where its sequences are images (image_size > 0), their pixels [num_seqs, 3, image_size, image_size]
    float32, each float in one int's four bytes."""

    request: int  # the front end's number for the request
    index: int  # the piece's place in its request
    offset: int
    num_tokens: int
    num_seqs: int
    max_seqlen: int
    num_outputs: int  # vector rows it fills: its sequences, or their segments
    is_segmented: bool
    opens_request: bool  # the request's first piece sent to this engine
    model: int = 0  # which of the engine's models computes it (its place in the server's --model list)
    weight: float = 1.0  # the request's share of a batch against other requests' (engine/queue/piece_queue.py)
    is_small: bool = False  # a request of a few hundred tokens at most: it may run between a batch's layers
    image_size: int = 0  # its sequences are images of this many pixels a side; 0: texts

    def num_ints(self) -> int:
        return ints_for(self.num_tokens, self.num_seqs, self.is_segmented, self.image_size)


class Cancel(msgspec.Struct, tag=True, array_like=True):
    """Front end -> engine: the request is over (its client left, it timed out, a piece of it
    failed or was refused): drop its pieces that have not run."""

    request: int


class Release(msgspec.Struct, tag=True, array_like=True):
    """Front end -> engine: the vector rows of these answered pieces are read; (first row, rows) each."""

    rows: list[tuple[int, int]]


class Goodbye(msgspec.Struct, tag=True, array_like=True):
    """Front end -> engine: this front end sends nothing more."""


class Ready(msgspec.Struct, tag=True, array_like=True):
    """Engine -> front end, once: the model is loaded and warm."""

    pid: int
    dtype: str
    attention: list[tuple[str, str, str]]  # (token bucket, max_seqlen bucket, backend) fixed at warm-up
    # Per model, in the server's order: (the width of its vector rows, the bytes its weights hold on the device).
    models: list[tuple[int, int]] = []
    max_batch_tokens: int | None = None  # the batch budget the queue cuts by, where warm-up chose it
    tokens_per_second: float = 0.0  # the device's speed at that budget, as warm-up measured it (0: not measured)


class LoadFailed(msgspec.Struct, tag=True, array_like=True):
    """Engine -> front end, once: the model could not be loaded; the engine serves nothing."""

    why: str


class PieceDone(msgspec.Struct, tag=True, array_like=True):
    """Engine -> front end: the piece's vectors are in the arena's rows from `first_row` (error
    None: the front end releases them once read), or it failed. `started` / `finished`:
    time.monotonic() of its first batch's launch and its last batch's vectors on the host
    (0.0 where nothing ran)."""

    request: int
    index: int
    error: str | None
    first_row: int
    started: float
    finished: float


class Cancelled(msgspec.Struct, tag=True, array_like=True):
    """Engine -> front end: the piece was dropped after a Cancel; its arena space is free again."""

    request: int
    index: int


ToEngine = Piece | Cancel | Release | Goodbye
ToFrontEnd = Ready | LoadFailed | PieceDone | Cancelled

_encoder = msgspec.msgpack.Encoder()
_to_engine = msgspec.msgpack.Decoder(ToEngine)
_to_front_end = msgspec.msgpack.Decoder(ToFrontEnd)


def encode(message: ToEngine | ToFrontEnd) -> bytes:
    return _encoder.encode(message)


def decode_to_engine(data: bytes) -> ToEngine:
    return _to_engine.decode(data)


def decode_to_front_end(data: bytes) -> ToFrontEnd:
    return _to_front_end.decode(data)


def ints_for(num_tokens: int, num_seqs: int, is_segmented: bool, image_size: int = 0) -> int:
    """The arena ints a piece takes (see Piece)."""
    one = 2 * num_tokens + num_seqs + 1
    if image_size:
        return one + num_seqs * image_floats(image_size)
    return 2 * one - num_tokens if is_segmented else one


class PieceFigures(NamedTuple):
    """A piece's sizes, as its Piece message and the arena's allocator read them."""

    num_tokens: int
    num_seqs: int
    max_seqlen: int
    num_outputs: int
    is_segmented: bool
    num_ints: int  # the arena ints it takes (ints_for)
    image_size: int = 0  # its sequences are images this many pixels a side; 0: texts


def piece_figures(batch: PackedBatch) -> PieceFigures:
    """Every size a front end sends or allocates for a piece, read from its batch at once."""
    num_tokens, num_seqs, is_segmented = batch.num_tokens, batch.num_seqs, batch.cu_segments is not None
    image_size = int(batch.pixels.shape[-1]) if batch.pixels is not None else 0
    return PieceFigures(num_tokens, num_seqs, batch.max_seqlen, batch.num_outputs, is_segmented,
                        ints_for(num_tokens, num_seqs, is_segmented, image_size), image_size)
