"""The supervisor: `rose-embed serve`'s own process. It starts one engine process per device, the
part processes the front ends share (server/processes/part_processes.py) and K front ends
(server/processes/front_end.py) connected to every engine, watches them, and stops them.

- K = 1 (a CPU server, or a GPU server on a small machine): the front end runs in this process;
  the engines are its children.
- K > 1: each front end is a spawned process on its own socket of the one port. A front end
  that dies is restarted on the same socket, with new links to every engine (connections the
  kernel queued on its socket meanwhile wait for it rather than being refused); one that dies
  again within `_CRASH_LOOP_S` of its restart stops the whole server (exit status 1), so
  that an orchestrator restarts a server that cannot keep a front end up.
- An engine that dies leaves the others serving; every front end sees it go (its pipes close)
  and /health names it. The keeper (server/processes/engine_keeper.py) logs it and restarts it, and every
  front end takes up the new process; past the restart limit the whole server stops with exit
  status 1. An engine that cannot load (its weights do not read, the device has no room) stops
  the whole server with exit status 1, whatever K is: every front end would fail to start again.
- On SIGTERM, SIGINT or SIGHUP every front end drains its requests within --shutdown-timeout
  and tells the engines it is done; then the engines exit and the shared memory is freed, and
  the server ends as the signal ends a process (SIGINT for Ctrl-C, else SIGTERM), whatever K is.
  Ctrl-C again ends the drain: the requests still in flight are answered 503.
  Every child also watches this process: should it be killed outright, none outlives it by
  more than a second or so (engine/contract/parent_watch.py).
"""

from __future__ import annotations

import functools
import logging
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from multiprocessing.connection import wait

from rose_embed.engine.contract.child_signals import STOP_SIGNALS, start_shielded
from rose_embed.engine.contract.owner_lock import hold_path
from rose_embed.server.links.admission_board import AdmissionBoard
from rose_embed.server.processes.engine_host import EngineHost
from rose_embed.server.processes.engine_keeper import EngineKeeper
from rose_embed.engine.model_files.loader import ModelSpec
from rose_embed.engine.contract.arena import ArenaLayout
from rose_embed.engine.model_files.clip import pixel_floats_per_token
from rose_embed.engine.text.tokenizer import tokenizer_recipe
from rose_embed.server.config import ServerConfig, model_configs
from rose_embed.server.processes.front_end import run_front_end, run_front_end_process
from rose_embed.server.http.logs import configure_logging
from rose_embed.server.processes.part_processes import PartProcessPool, start_part_processes
from rose_embed.server.processes.plugins import load_engine_plugin
from rose_embed.server.processes.stale_memory import remove_stale
from rose_embed.server.metrics.stats_board import create_board_dir, remove_board_dir
from rose_embed.server.processes.stop_signal import StopSignal, Terminated
from rose_embed.server.processes.topology import engine_config_for

logger = logging.getLogger("rose_embed.server")

_ENGINE_EXIT_TIMEOUT_S = 10.0  # after the front ends: an engine finishes what it holds
_CRASH_LOOP_S = 30.0  # a front end that dies this soon after its start is not restarted again


def run_supervisor(config: ServerConfig, specs: list[ModelSpec], sockets: list[socket.socket]) -> None:
    """Serve the models `specs` describes (in the order of `model_configs(config)`) on `sockets`
    (server/processes/listen.py: one per front end, the first listening) until a signal stops the server,
    then end by SIGTERM (KeyboardInterrupt after SIGINT); exits 1 if the front ends could not be
    kept up."""
    plugin = load_engine_plugin(config.engine_plugin) if config.engine_plugin else None
    remove_stale()  # what a server killed outright left in /dev/shm
    # One arena per (engine, front end) for every model: its vector rows fit the widest.
    layout = ArenaLayout.for_budget(config.engine.max_batch_tokens, config.engine.max_batch_seqs,
                                    max(spec.embedding_dim for spec in specs), pixel_floats_per_token(specs))
    logger.info("starting %d engine process(es) (%s) and %d front end(s) on port %d", len(config.devices),
                ", ".join(config.devices), config.frontend_workers, config.port)
    hosts: list[EngineHost] = []
    keeper: EngineKeeper | None = None
    part_processes: PartProcessPool | None = None
    terminated = False
    # uvicorn ends its graceful shutdown by raising the signal that asked for it again; SIGTERM's
    # default action would end this process there, before the engines stop and the shared
    # memory is freed. Raised as an exception instead, it leaves through the cleanup below.
    # Ctrl-C has the same handler, so that while the engines spawn and the front end imports
    # it is noted and raised afterwards, as SIGTERM is, not inside library code.
    stop = StopSignal()
    stop.install()
    try:
        with stop.deferred():  # a spawn cut short would leave its child a traceback
            if config.part_processes:  # before the front ends, which connect to them as they start
                # The first model's tokenizer: the others tokenize in the front ends (docs/topology.md).
                part_processes = start_part_processes(tokenizer_recipe(specs[0]), config.part_processes)
                config = replace(config, part_process_addresses=part_processes.addresses)
            for index, device in enumerate(config.devices):
                configs = [engine_config_for(c, config.devices, device) for c in model_configs(config)]
                hosts.append(EngineHost(index, configs, layout, plugin,
                                        functools.partial(configure_logging, config.log_level, config.log_format)))
        keeper = EngineKeeper(hosts, config.engine_max_restarts, config.engine_restart_window)
        if config.frontend_workers == 1:
            with keeper.lock:
                ends, restarts = [host.connect(0) for host in hosts], keeper.restart_pipe(0)
            keeper.start()
            run_front_end(config, sockets[0], ends, stop=stop, restarts=restarts)
        else:
            keeper.start()
            _FrontEnds(config, sockets, hosts, stop.pending, keeper).run()
    except Terminated:
        terminated = True
    finally:
        if keeper is not None:  # before the engines stop: their ends are no deaths to restart
            keeper.stop()
        for host in hosts:
            host.stop(_ENGINE_EXIT_TIMEOUT_S)
        if part_processes is not None:
            part_processes.stop()
        for sock in sockets:
            sock.close()
    if any(host.load_failure() for host in hosts):  # the front end stopped itself; what it logged says why
        sys.exit(1)
    if keeper is not None and keeper.has_given_up:  # an engine kept dying; the keeper logged why
        sys.exit(1)
    if terminated:  # end as SIGTERM ends a process, so that whoever sent it sees that status
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


class _FrontEnds:
    """K front-end processes: started, restarted when one dies, drained on a stop signal."""

    def __init__(self, config: ServerConfig, sockets: list[socket.socket], hosts: list[EngineHost],
                 pending_stop: Callable[[], int | None], keeper: EngineKeeper):
        # Where the front ends report to each other, so that each answers /metrics and /health for all,
        # and where each says what it has admitted, so that the queue's bound holds for all.
        self.admission_board = AdmissionBoard.create(config.frontend_workers)
        self.config = replace(config, stats_dir=create_board_dir(), admission_board=self.admission_board.name)
        # While it is held, the next server's start leaves the board alone (server/processes/stale_memory.py).
        self._board_lock = hold_path(self.config.stats_dir)
        self.sockets, self.hosts, self.keeper = sockets, hosts, keeper
        self._context = multiprocessing.get_context("spawn")
        self._processes: dict[int, multiprocessing.process.BaseProcess] = {}
        self._started: dict[int, float] = {}
        self._restarted: set[int] = set()
        self._stop = threading.Event()
        self._stopped_by: int | None = None
        self._is_forced = False  # a second Ctrl-C
        self._is_draining = False
        self._pending_stop = pending_stop

    def run(self) -> None:
        """Serve until a stop signal, then drain, and leave as one front end in this process
        leaves (Terminated, or KeyboardInterrupt after Ctrl-C); exits 1 instead if a front
        end could not be kept up or an engine could not load."""
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._on_stop_signal)
        pending = self._pending_stop()  # one that came before, its raise swallowed on the way
        if pending is not None:
            self._on_stop_signal(pending, None)
        failed = False
        try:
            for index in range(self.config.frontend_workers):
                self._start(index)
            while not self._stop.is_set():
                by_sentinel = {p.sentinel: i for i, p in self._processes.items()}
                for sentinel in wait(list(by_sentinel), timeout=0.5):
                    if self._stop.is_set() or self._engine_failed() or not self._restart(by_sentinel[sentinel]):
                        failed = not self._stop.is_set()
                        self._stop.set()
                        break
        finally:
            self._drain()
            remove_board_dir(self.config.stats_dir)
            os.close(self._board_lock)
            self.admission_board.close()
        if failed:
            sys.exit(1)
        if self._stopped_by == signal.SIGINT:
            raise KeyboardInterrupt
        raise Terminated

    def _on_stop_signal(self, signum: int, _frame) -> None:
        if self._stopped_by is None:
            self._stopped_by = signum
        elif signum == signal.SIGINT:
            self._is_forced = True
            if self._is_draining:
                self._force_front_ends()
        self._stop.set()

    def _force_front_ends(self) -> None:
        """A second Ctrl-C, passed on to front ends already draining: each cuts off what it still
        serves (server/http/forced_stop_server.py). Ctrl-C at a terminal reaches them itself; a
        `kill -INT` of this process twice does only through here."""
        for process in self._processes.values():
            if process.is_alive():
                try:
                    os.kill(process.pid, signal.SIGINT)
                except ProcessLookupError:  # it ended just now
                    pass

    def _start(self, index: int) -> None:
        with self.keeper.lock:  # no engine restarts between these ends and the restart pipe
            ends = [host.connect(index) for host in self.hosts]
            restarts = self.keeper.restart_pipe(index)
            process = self._context.Process(
                target=run_front_end_process, name=f"rose-frontend-{index}",
                args=(replace(self.config, worker_index=index), self.sockets[index], ends, os.getpid(), restarts))
            try:
                start_shielded(process)
            finally:
                for end in ends:  # the front end holds its own copies now; its exit shows as EOF to the engines
                    end.close()
                restarts.close()
        self._processes[index], self._started[index] = process, time.monotonic()

    def _engine_failed(self) -> bool:
        """Whether an engine could not load: a front end restarted would only fail again."""
        for host in self.hosts:
            if host.load_failure():
                logger.error("engine %d on %s failed to load; stopping the server", host.index, host.device)
                return True
        return False

    def _restart(self, index: int) -> bool:
        """Restart front end `index`, which has exited; False if it died too soon after a restart."""
        process = self._processes[index]
        process.join(1)
        lived = time.monotonic() - self._started[index]
        logger.error("front end %d (pid %s) exited with status %s after %.0f s", index, process.pid,
                     process.exitcode, lived)
        if index in self._restarted and lived < _CRASH_LOOP_S:
            logger.error("front end %d did not stay up after its restart; stopping the server", index)
            return False
        self._restarted.add(index)
        self._start(index)
        logger.info("front end %d restarted (pid %s)", index, self._processes[index].pid)
        return True

    def _drain(self) -> None:
        """Every front end drains (SIGTERM: uvicorn's graceful shutdown) against one deadline."""
        # Each front end stops accepting at once, but this process's copies of their sockets (kept
        # for restarts) would keep the port listening: the kernel would queue new connections that
        # nobody accepts for the whole drain, then reset them. Closed now, the port refuses them at
        # once, as a server with one front end does, and clients retry elsewhere.
        for sock in self.sockets:
            sock.close()
        for process in self._processes.values():
            if process.is_alive():
                os.kill(process.pid, signal.SIGTERM)
        self._is_draining = True  # a second Ctrl-C from now on is passed on at once
        if self._is_forced:
            self._force_front_ends()
        # A front end takes up to --shutdown-timeout for its requests, then up to 5 s for its batches.
        # They drain side by side: one that finishes early says nothing of how long the others need.
        deadline = time.monotonic() + self.config.shutdown_timeout + 10.0
        for process in self._processes.values():
            process.join(max(0.0, deadline - time.monotonic()))
        for index, process in self._processes.items():
            if process.is_alive():
                logger.error("front end %d did not stop in time; killing it", index)
                process.kill()
                process.join(5)
