"""Fault injection, loaded into a test server with `--engine-plugin tests.support.fault_plugins:install`.

It wraps the engine's `execute_packed`; a batch holding one of the marker token ids below
misbehaves, every other batch runs normally. Tests send the markers as token-id input, so
that only the requests they aim at are hit. ROSE_FAULT_DELAY_S (env) slows every batch,
so that tests can have work queued or in flight when they act.
"""

from __future__ import annotations

import os
import time

import numpy as np

RAISE_ID = 29999  # the batch raises (a path in the message must not reach the client)
NAN_ID = 29998  # the batch returns NaN for the sequences holding it
DIE_ID = 29997  # the engine thread dies (SystemExit, which ends a plain thread)
STALL_ID = 29996  # the engine thread hangs (a stuck kernel)


class _WithNaN:
    """A LazyResult whose rows for the marked sequences are NaN."""

    def __init__(self, lazy, rows: list[int]):
        self.lazy, self.rows = lazy, rows

    def ready(self) -> bool:
        return self.lazy.ready()

    def wait(self) -> np.ndarray:
        vectors = self.lazy.wait().copy()
        vectors[self.rows] = np.nan
        return vectors


def install(engine) -> None:
    real = engine.execute_packed
    delay = float(os.environ.get("ROSE_FAULT_DELAY_S", "0"))

    def execute_packed(batch):
        if delay:
            time.sleep(delay)
        ids = batch.input_ids
        if (ids == RAISE_ID).any():
            raise RuntimeError("injected fault in /secret/path/engine/rose/runner.py")
        if (ids == DIE_ID).any():
            raise SystemExit("injected: the engine thread dies")
        if (ids == STALL_ID).any():
            time.sleep(3600)
        lazy = real(batch)
        if (ids == NAN_ID).any():
            cu = batch.cu_seqlens
            rows = [i for i in range(batch.num_seqs) if (ids[cu[i]:cu[i + 1]] == NAN_ID).any()]
            return _WithNaN(lazy, rows)
        return lazy

    engine.execute_packed = execute_packed
