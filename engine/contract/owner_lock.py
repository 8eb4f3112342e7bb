"""A lock its creator holds on a shared-memory block or a server's stats directory for as long as
it lives, so that the next server can tell what a dead one left behind (server/processes/stale_memory.py).

The name says which process made a thing, but a process number proves nothing across PID
namespaces (containers sharing /dev/shm) and is reused in time; a lock does: the kernel drops it
when its holder dies, however it dies (SIGKILL, the OOM killer), and it holds across namespaces.
"""

from __future__ import annotations

import fcntl
import os


def hold(fd: int) -> None:
    """Hold the lock on the file open at `fd` until that is closed (or this process ends)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:  # a file system without locks: the process number alone will have to tell
        pass


def hold_path(path: str) -> int:
    """`hold` on `path` (a directory too); returns the descriptor to close when done."""
    fd = os.open(path, os.O_RDONLY)
    hold(fd)
    return fd


def is_held(path: str) -> bool:
    """Whether a live process holds the lock on `path` (or it cannot be told: then it counts as held)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)
