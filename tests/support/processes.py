"""What a server process leaves behind: its processes and its shared-memory segments (from /proc)."""

from __future__ import annotations

import re
from pathlib import Path

from rose_embed.engine.contract.shared_blocks import BLOCK_PREFIX

_MAPPED_BLOCK = re.compile(rf"/dev/shm/({re.escape(BLOCK_PREFIX)}\d+-[0-9a-f]+)$")


def _live_processes():
    """(pid, fields of /proc/PID/stat after the command name) for every process not a zombie."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            yield int(stat.parent.name), fields


def children(pid: int) -> set[int]:
    """The live processes whose parent is `pid`."""
    return {child for child, fields in _live_processes() if int(fields[1]) == pid}


def is_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def shared_memory() -> set[str]:
    """Every shared-memory block of rose-embed's on the machine (other users' too)."""
    return {p.name for p in Path("/dev/shm").glob(f"{BLOCK_PREFIX}[0-9]*")}


def block_creator(name: str) -> int:
    """The process that made a block (engine/contract/shared_blocks.py names it after it)."""
    return int(name.removeprefix(BLOCK_PREFIX).split("-", 1)[0])


def stats_boards(server_pid: int) -> set[Path]:
    """The stats-board directories of a --frontend-workers server (server/metrics/stats_board.py names them after it)."""
    return set(Path("/dev/shm").glob(f"rose-embed-stats-{server_pid}-*"))


def mapped_shared_memory(pids: set[int]) -> set[str]:
    """The blocks of rose-embed's that these processes have mapped: theirs, whoever else runs."""
    names = set()
    for pid in pids:
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            continue
        names |= {m.group(1) for m in map(_MAPPED_BLOCK.search, maps.splitlines()) if m}
    return names


def session_members(session_id: int) -> set[int]:
    """The live processes of a session (start the server with start_new_session=True): its
    children and theirs, also those whose parent died and that init adopted."""
    return {pid for pid, fields in _live_processes() if int(fields[3]) == session_id}


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
