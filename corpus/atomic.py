"""Files that appear whole or not at all, even when the process is killed mid-write."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def write_atomic(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """Write to a temporary file beside `path`, flush it to disk, then rename it over `path`.

    A rename within one directory is atomic on POSIX, so a reader (or a restarted job)
    sees either the old file or the complete new one, never a torn one.
    """
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with tmp.open("wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    sync_dir(path.parent)


def sync_dir(directory: Path) -> None:
    """Make a rename in `directory` durable (its entry is only on disk once the directory is)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
