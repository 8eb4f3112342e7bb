"""The admission board: what every front end has admitted and not yet seen computed, in shared memory.

One slot per front end, written by that front end only: (tokens outstanding, requests, the
largest request's outstanding tokens). Each front end reads every slot when it admits a
request (server/links/admission.py), so that the queue's bound holds for the whole server, not per
front end. One float64 per field; a reader may see a slot one update old, never a torn field.
The supervisor makes the board (and unlinks it); a front end started in place of one that
died zeroes the slot it takes over.
"""

from __future__ import annotations

from multiprocessing import shared_memory

import numpy as np

from rose_embed.engine.contract.shared_blocks import attach_block, close_block, create_block

_FIELDS = 3


class AdmissionBoard:
    def __init__(self, values: np.ndarray, shm: shared_memory.SharedMemory | None = None, owner: bool = False):
        self._values, self.shm, self._owner = values, shm, owner

    @classmethod
    def create(cls, num_front_ends: int) -> AdmissionBoard:
        shm = create_block(8 * _FIELDS * num_front_ends)
        board = cls(np.ndarray((num_front_ends, _FIELDS), np.float64, shm.buf), shm, owner=True)
        board._values[:] = 0.0
        return board

    @classmethod
    def attach(cls, name: str, num_front_ends: int) -> AdmissionBoard:
        shm = attach_block(name)
        return cls(np.ndarray((num_front_ends, _FIELDS), np.float64, shm.buf), shm)

    @classmethod
    def local(cls) -> AdmissionBoard:
        """A board of one slot in this process's memory: a server of one front end, or a test's app."""
        return cls(np.zeros((1, _FIELDS), np.float64))

    @property
    def name(self) -> str | None:
        return self.shm.name if self.shm is not None else None

    def write(self, slot: int, outstanding: float, num_requests: int, largest: float) -> None:
        self._values[slot] = (outstanding, num_requests, largest)

    def totals(self) -> tuple[float, int, float]:
        """(tokens outstanding, requests, the largest request's tokens) over every front end."""
        values = self._values
        return float(values[:, 0].sum()), int(values[:, 1].sum()), float(values[:, 2].max())

    def close(self) -> None:
        if self.shm is not None:
            self._values = None  # the view must go before the mapping can close
            close_block(self.shm, self._owner)
