"""The engine keeper: a thread of the supervisor that restarts engine processes that die.

An engine process that ends while the server runs (killed, crashed, out of memory, or killed
by a front end's watchdog as wedged: server/links/stall_watch.py) is logged, with its device and how
it ended, and started again with its models, after the back-off that server/processes/restart_policy.py
sets. Every front end hears of it at once on its restart pipe (server/links/reattach.py), so
that /health and the 503s say why and when to retry, then gets new ends to the new process;
it serves again once that one is warm. Past the restart limit, or when a restarted engine cannot
load, the keeper stops the server as a stop signal would (SIGTERM: the front ends drain what
the other engines still compute), and the supervisor then exits with status 1.

`lock` is held while front ends are connected to the engines: a front end (re)started by the
supervisor meanwhile gets ends to the new process or a restart message, never neither.
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import os
import signal
import threading
import time
from multiprocessing.connection import Connection, wait

from rose_embed.server.links.engine_ends import exit_reason
from rose_embed.server.processes.engine_host import EngineHost
from rose_embed.server.links.reattach import EngineDown, EngineUp
from rose_embed.server.processes.restart_policy import RestartPolicy

logger = logging.getLogger("rose_embed.server")

_TICK_S = 0.5  # how often a restarted engine's load is looked at
_UNKNOWN_LOAD_S = 5.0  # a restart's estimate before any engine has been timed to warm


class EngineKeeper:
    """Started once the engines are; `stop` before they are stopped."""

    def __init__(self, hosts: list[EngineHost], max_restarts: int, window_s: float):
        self.hosts = hosts
        self._policies = [RestartPolicy(max_restarts, window_s) for _ in hosts]
        self.lock = threading.RLock()
        self._context = multiprocessing.get_context("spawn")
        self._restart_pipes: dict[int, Connection] = {}  # by front end: the keeper's end of its restart pipe
        self._due: dict[int, float] = {}  # by engine: when its restart is due
        self._warming: set[int] = set()  # engines restarted and not yet warm
        self._stop = threading.Event()
        self._wake_reader, self._wake_writer = self._context.Pipe(duplex=False)
        self.has_given_up = False
        self._thread = threading.Thread(target=self._run, name="rose-engine-keeper", daemon=True)

    def restart_pipe(self, front_end: int) -> Connection:
        """The end of a new restart pipe to hand to front end `front_end` (replacing its predecessor's);
        call it under `lock`, with the front end's connections to the engines."""
        reader, writer = self._context.Pipe(duplex=False)
        previous = self._restart_pipes.pop(front_end, None)
        if previous is not None:
            previous.close()
        self._restart_pipes[front_end] = writer
        return reader

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """No more restarts (the server is stopping); returns once a restart under way is done."""
        self._stop.set()
        self._wake_writer.send_bytes(b"")
        if self._thread.is_alive():
            self._thread.join()
        for pipe in self._restart_pipes.values():
            pipe.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.has_given_up:  # the server is stopping; nothing more to restart
                self._stop.wait()
                return
            now = time.monotonic()
            timeout = min([_TICK_S, *(max(0.0, due - now) for due in self._due.values())])
            watched = {host.process.sentinel: host for host in self.hosts if host.index not in self._due}
            ended = wait([*watched, self._wake_reader], timeout)
            with self.lock:
                if self._stop.is_set():
                    return
                for sentinel in ended:
                    if sentinel in watched:
                        self._on_death(watched[sentinel])
                for index, due in list(self._due.items()):
                    if due <= time.monotonic() and not self.has_given_up:
                        self._restart(self.hosts[index])
                self._look_at_loads()

    def _on_death(self, host: EngineHost) -> None:
        host.process.join(1.0)  # its sentinel fires as it exits; the status follows at once
        why = exit_reason(host.process.exitcode)
        self._warming.discard(host.index)
        policy = self._policies[host.index]
        delay = policy.next_delay()
        who = f"engine {host.index} on {host.device} (pid {host.pid})"
        if delay is None:
            self._give_up(f"{who} died: {why}; it was restarted {policy.max_restarts} time(s) within "
                          f"{policy.window_s:.0f} s (--engine-max-restarts, --engine-restart-window)")
            return
        restart = f"restart {policy.num_recent} of at most {policy.max_restarts} within {policy.window_s:.0f} s"
        logger.error("%s died: %s; restarting it %s (%s)", who, why,
                     "at once" if delay == 0 else f"in {delay:.0f} s", restart)
        load = host.load_seconds or max((h.load_seconds or 0.0 for h in self.hosts), default=0.0) or _UNKNOWN_LOAD_S
        self._tell(EngineDown(host.index, f"{why}; restarting it ({restart})",
                              int(min(60, max(1, math.ceil(delay + load))))))
        self._due[host.index] = time.monotonic() + delay

    def _restart(self, host: EngineHost) -> None:
        """A new process for `host`, and every front end given its ends."""
        del self._due[host.index]
        host.restart()
        for front_end in list(self._restart_pipes):
            ends = host.connect(front_end)
            try:
                self._restart_pipes[front_end].send(EngineUp(ends))
            except OSError:  # that front end is gone; the one started in its place is connected as it starts
                pass
            finally:
                ends.close()  # sent: the front end gets copies of its own
        self._warming.add(host.index)
        logger.info("engine %d on %s started again (pid %d); serving once it is warm", host.index, host.device,
                    host.pid)

    def _look_at_loads(self) -> None:
        """How long each engine took to be warm (the next restart's estimate), and whether a restarted
        one could not load: that stops the server, as at its start."""
        for host in self.hosts:
            if host.index in self._due:
                continue  # dead, its restart due later
            if host.index not in self._warming:
                if host.load_seconds is None:  # loading since the server's start: the front ends report a failure
                    host.is_ready()
                continue
            failure = host.load_failure()
            if failure is not None:
                self._give_up(f"engine {host.index} on {host.device} could not load after its restart: {failure}")
            elif host.is_ready():
                self._warming.discard(host.index)
                logger.info("engine %d on %s is warm again after %.1f s", host.index, host.device, host.load_seconds)

    def _tell(self, message) -> None:
        for pipe in self._restart_pipes.values():
            try:
                pipe.send(message)
            except OSError:
                pass

    def _give_up(self, why: str) -> None:
        """Stop the server as SIGTERM does; the supervisor then exits with status 1."""
        if self.has_given_up:
            return
        self.has_given_up = True
        logger.error("%s; stopping the server (exit status 1) for its orchestrator to restart it", why)
        os.kill(os.getpid(), signal.SIGTERM)
