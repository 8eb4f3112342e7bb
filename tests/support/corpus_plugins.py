"""Engine plugins for the corpus tests, loaded by `rose-embed embed --engine-plugin ...`.

`count` records how many texts each executed batch held (read back from this module by a
test that runs the CLI in its own process); `kill_after` SIGKILLs the process, with no
chance to clean up, once ROSE_KILL_AFTER_TEXTS texts have been embedded.
"""

from __future__ import annotations

import os
import signal

executed: list[int] = []  # texts per executed batch, in this process


def count(engine) -> None:
    real = engine.execute_packed

    def execute_packed(batch):
        executed.append(batch.num_seqs)
        return real(batch)

    engine.execute_packed = execute_packed


def kill_after(engine) -> None:
    real = engine.execute_packed
    limit = int(os.environ["ROSE_KILL_AFTER_TEXTS"])
    done = [0]

    def execute_packed(batch):
        if done[0] >= limit:
            os.kill(os.getpid(), signal.SIGKILL)
        done[0] += batch.num_seqs
        return real(batch)

    engine.execute_packed = execute_packed
