"""Shared-memory slots between the front end and one engine process.

Each slot holds one packed batch on its way in (input_ids, positions, cu_seqlens: int32,
and segment_ids, cu_segments where late-chunked documents pool several vectors per
sequence: engine/rose/batch.py) and its vectors on their way out (float32 [max_seqs, dim]: a
batch pools at most max_seqs vectors, as it holds at most max_seqs sequences). The front
end writes a batch into a free slot and sends only (slot, num_tokens, num_seqs, max_seqlen,
num_outputs) down a pipe, num_outputs None for a batch of one vector per sequence; the
engine reads the arrays in place and writes the vectors back into the same slot. A slot
is reused only after its reply came back, so neither side ever waits on a lock.
"""

from __future__ import annotations

from dataclasses import dataclass
from multiprocessing import shared_memory

import numpy as np

from engine.rose.batch import PackedBatch
from engine.child_signals import start_resource_tracker


@dataclass(frozen=True)
class SlotLayout:
    """Sizes of every slot; both processes build the same views from it."""

    num_slots: int
    max_tokens: int
    max_seqs: int
    dim: int

    @property
    def ints_per_slot(self) -> int:
        # input_ids, positions, segment_ids; cu_seqlens, cu_segments
        return 3 * self.max_tokens + 2 * (self.max_seqs + 1)

    @property
    def nbytes(self) -> int:
        return self.num_slots * 4 * (self.ints_per_slot + self.max_seqs * self.dim)


class SharedSlots:
    """Numpy views of one shared-memory block; `create` in the front end, `attach` in the engine."""

    def __init__(self, shm: shared_memory.SharedMemory, layout: SlotLayout, owner: bool):
        self.shm, self.layout, self._owner = shm, layout, owner
        n, ints = layout.num_slots, layout.ints_per_slot
        self._ints = np.ndarray((n, ints), np.int32, shm.buf)
        self._floats = np.ndarray((n, layout.max_seqs, layout.dim), np.float32, shm.buf, offset=n * ints * 4)

    @classmethod
    def create(cls, layout: SlotLayout) -> SharedSlots:
        start_resource_tracker()  # before the block it is to track (a no-op once it runs)
        return cls(shared_memory.SharedMemory(create=True, size=layout.nbytes), layout, owner=True)

    @classmethod
    def attach(cls, name: str, layout: SlotLayout) -> SharedSlots:
        # A spawned child shares its parent's resource tracker, so attaching registers nothing
        # new; only the creator unlinks the block.
        return cls(shared_memory.SharedMemory(name=name), layout, owner=False)

    @property
    def name(self) -> str:
        return self.shm.name

    def _input_views(self, slot: int, num_tokens: int, num_seqs: int) -> tuple[np.ndarray, ...]:
        """(input_ids, positions, cu_seqlens, segment_ids, cu_segments) of the slot."""
        row, t, s = self._ints[slot], self.layout.max_tokens, self.layout.max_seqs + 1
        cu = row[3 * t:]
        return (row[:num_tokens], row[t : t + num_tokens], cu[: num_seqs + 1],
                row[2 * t : 2 * t + num_tokens], cu[s : s + num_seqs + 1])

    def write_batch(self, slot: int, batch: PackedBatch) -> None:
        most = max(batch.num_seqs, batch.num_outputs)
        if batch.num_tokens > self.layout.max_tokens or most > self.layout.max_seqs:
            raise ValueError(f"a batch of {batch.num_tokens} tokens / {most} sequences or vectors does not fit a "
                             f"slot ({self.layout.max_tokens} / {self.layout.max_seqs})")
        views = self._input_views(slot, batch.num_tokens, batch.num_seqs)
        views[0][:], views[1][:], views[2][:] = batch.input_ids, batch.positions, batch.cu_seqlens
        if batch.cu_segments is not None:
            views[3][:], views[4][:] = batch.segment_ids, batch.cu_segments

    def read_batch(self, slot: int, num_tokens: int, num_seqs: int, max_seqlen: int,
                   num_outputs: int | None = None) -> PackedBatch:
        """The batch as views into the slot (no copy): valid until the slot's reply is sent.
        `num_outputs` None: one vector per sequence (the segment arrays were not written)."""
        input_ids, positions, cu_seqlens, segment_ids, cu_segments = self._input_views(slot, num_tokens, num_seqs)
        if num_outputs is None:
            return PackedBatch(input_ids, positions, cu_seqlens, max_seqlen)
        return PackedBatch(input_ids, positions, cu_seqlens, max_seqlen, segment_ids, cu_segments)

    def output(self, slot: int) -> np.ndarray:
        """The slot's vector rows, float32 [max_seqs, dim]."""
        return self._floats[slot]

    def close(self) -> None:
        # Views must go before the mapping can close.
        self._ints = self._floats = None
        try:
            self.shm.close()
        except BufferError:  # a view of it is still alive somewhere; the mapping goes with the process
            pass
        if self._owner:
            self.shm.unlink()
