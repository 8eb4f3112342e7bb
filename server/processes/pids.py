"""Whether a process still runs, told by its pid alone (a process that is not our child, too)."""

from __future__ import annotations

import os
from pathlib import Path


def is_running(pid: int) -> bool:
    """True while `pid` runs; a zombie (dead, its parent not told yet) does not. Another user's
    process, which may not be signalled, counts as running."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # dead but not yet reaped by its parent (Linux tells)
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True
