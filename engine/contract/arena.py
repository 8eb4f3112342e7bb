"""The shared-memory arena between one front end and one engine process.

Two areas: ints (each piece's packed token arrays, written by the front end) and vector rows
(float32 [num_rows, dim], written by the engine). Each side allocates one area (`Allocator`),
so neither ever waits on a lock: the front end takes a run of ints for a piece and gives it
back once the engine has answered for it; the engine takes a run of rows for a piece when it
starts computing it and gives it back once the front end has read the vectors (a Release
message). The ints hold a few full batches: one computing, one queued behind it, and what
the queue shares the next ones among; the front end keeps the rest of its pieces until there
is room, handing the room out fairly too (server/links/engine_link.py). One more batch's worth
of ints at their end is kept for small requests' pieces (`reserved_ints`): a bulk request fills
the rest, and a query sent meanwhile through the same front end finds room at once instead of
waiting for a batch to land. The rows hold a few full batches, as only pieces on the device or
just answered hold any.
"""

from __future__ import annotations

from dataclasses import dataclass
from multiprocessing import shared_memory

import numpy as np

from rose_embed.engine.contract.shared_blocks import attach_block, close_block, create_block
from rose_embed.engine.contract.batch import PackedBatch, image_floats

# Full batches' worth of tokens and vectors an arena holds: one computing, one queued behind it,
# and room for the front end to write the next while those run.
BATCHES_PER_ARENA = 3


@dataclass(frozen=True)
class ArenaLayout:
    """Sizes of one arena; both processes build the same views from it."""

    num_ints: int
    num_rows: int
    dim: int
    reserved_ints: int = 0  # the last of num_ints: small requests' pieces only

    @classmethod
    def for_budget(cls, max_batch_tokens: int, max_batch_seqs: int, dim: int,
                   pixel_floats_per_token: int = 0) -> ArenaLayout:
        """`pixel_floats_per_token`: where a served model embeds images, the most floats of pixels an image
        holds per token it counts (engine/model_files/clip.py's `pixel_floats_per_token`); 0: texts only."""
        # A piece of texts takes at most 3 ints per token and 2 per sequence (engine/contract/messages.py); one of
        # images 2 per token, 1 per image and its pixels.
        batch_ints = max(3, 2 + pixel_floats_per_token) * max_batch_tokens + 2 * (max_batch_seqs + 1)
        return cls((BATCHES_PER_ARENA + 1) * batch_ints, BATCHES_PER_ARENA * max_batch_seqs, dim, batch_ints)

    @property
    def nbytes(self) -> int:
        return 4 * (self.num_ints + self.num_rows * self.dim)


class Arena:
    """Numpy views of one shared-memory block: `create` where it is owned (the supervisor, or an
    in-process engine's maker), `attach` in the front end and the engine."""

    def __init__(self, shm: shared_memory.SharedMemory, layout: ArenaLayout, owner: bool):
        self.shm, self.layout, self._owner = shm, layout, owner
        self.ints = np.ndarray((layout.num_ints,), np.int32, shm.buf)
        self.rows = np.ndarray((layout.num_rows, layout.dim), np.float32, shm.buf, offset=4 * layout.num_ints)

    @classmethod
    def create(cls, layout: ArenaLayout) -> Arena:
        return cls(create_block(layout.nbytes), layout, owner=True)

    @classmethod
    def attach(cls, name: str, layout: ArenaLayout) -> Arena:
        return cls(attach_block(name), layout, owner=False)

    @property
    def name(self) -> str:
        return self.shm.name

    def write_piece(self, offset: int, batch: PackedBatch) -> None:
        """The piece's arrays, laid out as engine/contract/messages.py's Piece says, from `offset`."""
        t, s = batch.num_tokens, batch.num_seqs
        ints = self.ints
        ints[offset : offset + t] = batch.input_ids
        ints[offset + t : offset + 2 * t] = batch.positions
        ints[offset + 2 * t : offset + 2 * t + s + 1] = batch.cu_seqlens
        if batch.pixels is not None:
            start = offset + 2 * t + s + 1
            pixels = np.ascontiguousarray(batch.pixels, dtype=np.float32).reshape(-1)
            ints[start : start + len(pixels)].view(np.float32)[:] = pixels
        elif batch.cu_segments is not None:
            start = offset + 2 * t + s + 1
            ints[start : start + t] = batch.segment_ids
            ints[start + t : start + t + s + 1] = batch.cu_segments

    def read_piece(self, offset: int, num_tokens: int, num_seqs: int, max_seqlen: int,
                   is_segmented: bool, image_size: int = 0) -> PackedBatch:
        """The piece (as engine/contract/messages.py's Piece places it) as a batch of views into the arena
        (no copy): valid until it is answered."""
        t, s, ints = num_tokens, num_seqs, self.ints
        input_ids, positions = ints[offset : offset + t], ints[offset + t : offset + 2 * t]
        cu_seqlens = ints[offset + 2 * t : offset + 2 * t + s + 1]
        if image_size:
            start, floats = offset + 2 * t + s + 1, s * image_floats(image_size)
            if start + floats > len(ints):
                raise ValueError(f"a piece of {s} images of {image_size} pixels a side does not fit the arena")
            pixels = ints[start : start + floats].view(np.float32).reshape(s, 3, image_size, image_size)
            return PackedBatch(input_ids, positions, cu_seqlens, max_seqlen, pixels=pixels)
        if not is_segmented:
            return PackedBatch(input_ids, positions, cu_seqlens, max_seqlen)
        start = offset + 2 * t + s + 1
        return PackedBatch(input_ids, positions, cu_seqlens, max_seqlen, ints[start : start + t],
                           ints[start + t : start + t + s + 1])

    def close(self) -> None:
        self.ints = self.rows = None  # views must go before the mapping can close
        close_block(self.shm, self._owner)


class Allocator:
    """First fit over one area of an arena, kept by the front end that writes into it."""

    def __init__(self, size: int, first: int = 0):
        """Units [first, first + size) of the area."""
        self.size, self.first = size, first
        self._free: list[list[int]] = [[first, size]]  # [start, length], sorted by start, never adjacent

    @property
    def num_free(self) -> int:
        return sum(length for _, length in self._free)

    def take(self, length: int) -> int | None:
        """The start of `length` free units (now taken), or None where no run is long enough."""
        for i, run in enumerate(self._free):
            if run[1] >= length:
                start = run[0]
                run[0] += length
                run[1] -= length
                if run[1] == 0:
                    del self._free[i]
                return start
        return None

    def give_back(self, start: int, length: int) -> None:
        if length == 0:
            return
        free = self._free
        i = 0
        while i < len(free) and free[i][0] < start:
            i += 1
        free.insert(i, [start, length])
        if i + 1 < len(free) and start + length == free[i + 1][0]:  # joins the run after it
            free[i][1] += free.pop(i + 1)[1]
        if i > 0 and free[i - 1][0] + free[i - 1][1] == start:  # ... and the run before it
            free[i - 1][1] += free.pop(i)[1]
