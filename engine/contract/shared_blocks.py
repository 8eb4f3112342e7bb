"""Shared-memory blocks between processes (engine/contract/arena.py, engine/contract/board.py): made where they are
owned, attached everywhere else, and let go of the same way by both."""

from __future__ import annotations

import os
import secrets
from multiprocessing import shared_memory

from rose_embed.engine.contract.child_signals import start_resource_tracker
from rose_embed.engine.contract.owner_lock import hold


# Blocks are named after the process that made them, so that one left behind in /dev/shm says
# whose it was. Short enough for every platform's limit (macOS allows 31 characters).
BLOCK_PREFIX = "rose-embed-"


def create_block(size: int) -> shared_memory.SharedMemory:
    start_resource_tracker()  # before the block it is to track (a no-op once it runs)
    while True:
        try:
            shm = shared_memory.SharedMemory(f"{BLOCK_PREFIX}{os.getpid()}-{secrets.token_hex(4)}", create=True,
                                             size=size)
        except FileExistsError:  # that name is taken: draw another, as multiprocessing does for its own
            continue
        # Held on the block's own descriptor, which it keeps open until closed: so long as the block
        # is in use, the next server's start leaves it alone (server/processes/stale_memory.py).
        hold(shm._fd)
        return shm


def attach_block(name: str) -> shared_memory.SharedMemory:
    # A spawned child shares its parent's resource tracker, so attaching registers nothing new;
    # only the creator unlinks the block.
    return shared_memory.SharedMemory(name=name)


def close_block(shm: shared_memory.SharedMemory, is_owner: bool) -> None:
    """Unmap the block (the caller has dropped its views of it); the owner also unlinks it."""
    try:
        shm.close()
    except BufferError:  # a view of it is still alive somewhere; the mapping goes with the process
        pass
    if is_owner:
        try:
            shm.unlink()
        except FileNotFoundError:
            pass
