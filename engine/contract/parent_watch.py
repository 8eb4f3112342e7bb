"""A child process ends itself when its parent is gone.

A parent killed outright (SIGKILL, the OOM killer) cannot stop its children, which would
keep the port, the device and shared memory for ever. So each child watches its parent.
The parent's pid comes from the parent: read in the child, `os.getppid()` may already be
init's, when the parent died before the child got that far (a loaded machine starting a
spawned interpreter takes seconds).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable


def exit_with_parent(parent_pid: int, on_orphan: Callable[[], None], interval: float = 0.5) -> None:
    """Call `on_orphan` (once, on a daemon thread) as soon as this process's parent is not `parent_pid`."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(interval)
        on_orphan()

    threading.Thread(target=watch, name="rose-parent-watch", daemon=True).start()
