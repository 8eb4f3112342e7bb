"""Shared-memory slots between the front end and one engine process.

Each slot holds one packed batch on its way in (input_ids, positions, cu_seqlens: int32)
and its vectors on their way out (float32 [max_seqs, dim]). The front end writes a batch
into a free slot and sends only (slot, num_tokens, num_seqs, max_seqlen) down a pipe; the
engine reads the arrays in place and writes the vectors back into the same slot. A slot
is reused only after its reply came back, so neither side ever waits on a lock.
"""

from __future__ import annotations

from dataclasses import dataclass
from multiprocessing import shared_memory

import numpy as np

from engine.batch import PackedBatch
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
        return 2 * self.max_tokens + self.max_seqs + 1  # input_ids, positions, cu_seqlens

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

    def _input_views(self, slot: int, num_tokens: int, num_seqs: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        row, t = self._ints[slot], self.layout.max_tokens
        return row[:num_tokens], row[t : t + num_tokens], row[2 * t : 2 * t + num_seqs + 1]

    def write_batch(self, slot: int, batch: PackedBatch) -> None:
        if batch.num_tokens > self.layout.max_tokens or batch.num_seqs > self.layout.max_seqs:
            raise ValueError(f"a batch of {batch.num_tokens} tokens / {batch.num_seqs} sequences does not fit a slot "
                             f"({self.layout.max_tokens} / {self.layout.max_seqs})")
        input_ids, positions, cu_seqlens = self._input_views(slot, batch.num_tokens, batch.num_seqs)
        input_ids[:], positions[:], cu_seqlens[:] = batch.input_ids, batch.positions, batch.cu_seqlens

    def read_batch(self, slot: int, num_tokens: int, num_seqs: int, max_seqlen: int) -> PackedBatch:
        """The batch as views into the slot (no copy): valid until the slot's reply is sent."""
        return PackedBatch(*self._input_views(slot, num_tokens, num_seqs), max_seqlen)

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
