"""What a server killed outright left in /dev/shm, removed as the next one starts.

Shared-memory blocks (engine/contract/shared_blocks.py) and the stats board (server/metrics/stats_board.py) are
removed by the supervisor when it stops, and by multiprocessing's resource tracker when the
supervisor dies alone. `kill -9` of the whole process group (an orchestrator's, a terminal's)
takes the tracker with it, and they stay: megabytes of RAM each, until the machine restarts.

So the supervisor removes, as it starts, those that are provably stale: named after a process
(`rose-embed-PID-*`, `rose-embed-stats-PID-*`) that is gone, and whose lock nobody holds
(engine/contract/owner_lock.py: a live server holds it on each of its own, whatever PID namespace it runs
in). A block another live server uses is never touched, nor anything not named so.
"""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path

from rose_embed.engine.contract.owner_lock import is_held
from rose_embed.engine.contract.shared_blocks import BLOCK_PREFIX
from rose_embed.server.processes.pids import is_running
from rose_embed.server.metrics.stats_board import BOARD_PREFIX

logger = logging.getLogger("rose_embed.server")

SHM_DIR = Path("/dev/shm")
_OWNED = re.compile(rf"(?:{re.escape(BLOCK_PREFIX)}|{re.escape(BOARD_PREFIX)})(\d+)-[0-9A-Za-z_]+")


def remove_stale(directory: Path = SHM_DIR) -> list[str]:
    """Remove what dead servers left in `directory`; the names removed."""
    try:
        entries = list(directory.iterdir())
    except OSError:  # no /dev/shm here (macOS): the blocks live where the system keeps them
        return []
    removed = []
    for path in entries:
        match = _OWNED.fullmatch(path.name)
        if match is None or is_running(int(match.group(1))) or is_held(str(path)):
            continue
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        except OSError:  # another user's, or removed meanwhile by another server starting
            continue
        removed.append(path.name)
    if removed:
        owners = sorted({int(_OWNED.fullmatch(name).group(1)) for name in removed})
        logger.warning("removed %d shared-memory block(s) and stats board(s) that stopped servers left in %s "
                       "(pids %s)", len(removed), directory, ", ".join(map(str, owners)))
    return removed
