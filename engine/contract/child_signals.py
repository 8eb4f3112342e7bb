"""Child processes that Ctrl-C, a hang-up or `kill` cannot interrupt while they start.

Ctrl-C and a terminal's hang-up reach every process of the foreground group, and systemd or
`timeout` send SIGTERM to the whole group too. A spawned child spends its first seconds
importing torch, before its main function can say how it wants these signals handled; a
signal then would end it with a KeyboardInterrupt traceback or without its cleanup. So the
parent starts it with them blocked (a child inherits the starting thread's signal mask), and
the child, once its handlers are in place, lets them through: one that came meanwhile is
delivered then, to those handlers. The parent itself decides when its children stop.
"""

from __future__ import annotations

import multiprocessing
import signal
from multiprocessing import resource_tracker

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def start_shielded(process: multiprocessing.process.BaseProcess) -> None:
    """`process.start()` with STOP_SIGNALS blocked in the child until it calls `unshield`.
    Safe from any thread: only the calling thread's mask changes, and only meanwhile."""
    # A spawn starts the resource tracker first if it is not running, and multiprocessing
    # unblocks SIGINT and SIGTERM once it has: the child would then start unshielded.
    start_resource_tracker()
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        process.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def unshield(ignore: tuple[signal.Signals, ...] = ()) -> None:
    """In the child, from its main thread: ignore `ignore`, then let STOP_SIGNALS through."""
    for sig in ignore:
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def start_resource_tracker() -> None:
    """Start multiprocessing's resource tracker (it unlinks the shared memory of a process that
    died without doing so) shielded too: it ignores SIGINT and SIGTERM itself, but a hang-up
    would kill it, and the shared memory would outlive the server."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        resource_tracker.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
