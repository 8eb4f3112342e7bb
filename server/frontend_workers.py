"""`serve --frontend-workers K`: K front-end processes on one port, feeding one engine per device.

One Python event loop tops out at some 13,000 short texts/s (HTTP, JSON, futures), while
an H200 computes more than twice that. So with K > 1 the parent process only supervises:

- it starts one engine process per device (engine/shared_engine.py), each with a set of
  shared-memory slots and a pair of pipes for every front end;
- it is handed K sockets bound to the port with SO_REUSEPORT (server/listen.py, before
  anything starts), so that the kernel spreads new connections over them (by their
  addresses' hash), and starts K front-end processes,
  each serving one socket with its own uvicorn, event loop, tokenizer threads, batcher
  and encoders, exactly as the single-process server does (server/app.py), its batcher
  seeing each engine as a replica;
- readiness: the first front end listens at once and, as a single-process server does,
  answers 503 on /health until the engines are warm; the others listen only once they
  are ready (their lifespan waits for the engines, and a bound socket that does not
  listen gets no connections), so whichever front end answers a 200 can serve;
- on SIGTERM, SIGINT or SIGHUP it passes SIGTERM to every front end (each drains its requests
  within --shutdown-timeout and tells the engines it is done), then waits for the engines
  to exit, kills what is left and frees the shared memory. If a front end dies on its own,
  the parent shuts the whole server down (exit status 1), so that an orchestrator
  restarts it rather than a server with a share of its port unanswered.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import replace
from multiprocessing.connection import wait

from engine.child_signals import STOP_SIGNALS, start_shielded, unshield
from engine.data_parallel import engine_config_for
from engine.loader import ModelSpec
from engine.parent_watch import exit_with_parent
from engine.shared_engine import FrontEndEnds, SharedEngine, SharedEngines
from engine.shm_slots import SlotLayout
from server.config import ServerConfig
from server.plugins import load_engine_plugin

logger = logging.getLogger("rose_embed.server")

_ENGINE_EXIT_TIMEOUT_S = 10.0  # after the front ends: the engine finishes what it holds


def serve_frontend_workers(config: ServerConfig, spec: ModelSpec, sockets: list[socket.socket]) -> None:
    """Run the parent on `sockets` (server/listen.py: bound to the port, one per front end; the
    first listening). Blocks until the server has stopped; exits 1 if a front end died."""
    num_workers = config.frontend_workers
    devices = config.devices
    stop = threading.Event()
    for sig in STOP_SIGNALS:
        signal.signal(sig, lambda *_: stop.set())
    plugin = load_engine_plugin(config.engine_plugin) if config.engine_plugin else None
    layout = SlotLayout(config.batches_in_flight, config.engine.max_batch_tokens, config.engine.max_batch_seqs,
                        spec.embedding_dim)
    engines: list[SharedEngine] = []
    workers: list[multiprocessing.Process] = []
    died: str | None = None
    try:
        logger.info("starting %d engine process(es) (%s) and %d front-end processes on port %d",
                    len(devices), ", ".join(devices), num_workers, config.port)
        for index, device in enumerate(devices):
            engine_config = engine_config_for(config.engine, devices, device)
            engines.append(SharedEngine(index, engine_config, layout, num_workers, plugin))
        context = multiprocessing.get_context("spawn")
        for k in range(num_workers):
            worker_config = replace(config, worker_index=k)
            ends = [engine.ends_for(k) for engine in engines]
            worker = context.Process(target=run_frontend_worker, name=f"rose-frontend-{k}",
                                     args=(worker_config, sockets[k], ends, os.getpid()))
            start_shielded(worker)
            workers.append(worker)
        for sock in sockets:  # each front end holds its own now
            sock.close()
        for engine in engines:
            engine.release_front_end_ends()
        sentinels = {w.sentinel: w for w in workers}
        while not stop.is_set():
            done = wait(list(sentinels), timeout=0.5)
            if done:
                worker = sentinels[done[0]]
                died = f"front end {worker.name} (pid {worker.pid}) exited with status {worker.exitcode}"
                logger.error("%s; stopping the server", died)
                break
    finally:
        _shut_down(workers, engines, config.shutdown_timeout)
        for sock in sockets:
            sock.close()
    if died is not None:
        sys.exit(1)


def _shut_down(workers: list[multiprocessing.Process], engines: list[SharedEngine], shutdown_timeout: float) -> None:
    """Drain every front end (SIGTERM: uvicorn's graceful shutdown), then stop the engines."""
    for worker in workers:
        if worker.is_alive():
            os.kill(worker.pid, signal.SIGTERM)
    # A front end takes up to --shutdown-timeout for its requests, then up to 5 s for its batches.
    # They drain side by side, each against the same deadline: one that finishes early (no
    # requests left) says nothing of how long the others still need.
    deadline = time.monotonic() + shutdown_timeout + 10.0
    for worker in workers:
        worker.join(max(0.0, deadline - time.monotonic()))
    for worker in workers:
        if worker.is_alive():
            logger.error("front end %s did not stop in time; killing it", worker.name)
            worker.kill()
            worker.join(5)
    for engine in engines:
        engine.stop(_ENGINE_EXIT_TIMEOUT_S)


def _stop_orphan(parent_pid: int) -> None:
    """A parent killed outright (SIGKILL) cannot stop its front ends; they stop themselves
    (gracefully, as on SIGTERM) rather than keep the port as orphans."""
    logger.error("the parent process (pid %d) is gone; shutting down", parent_pid)
    os.kill(os.getpid(), signal.SIGTERM)


def run_frontend_worker(config: ServerConfig, sock: socket.socket, ends: list[FrontEndEnds], parent_pid: int) -> None:
    """The main function of one front-end process: the usual app, served on its socket."""
    exit_with_parent(parent_pid, lambda: _stop_orphan(parent_pid))
    import uvicorn

    from server.app import create_app
    from server.logs import configure_logging
    from server.middleware import ObservedApp

    # The parent passes Ctrl-C and a hang-up on as SIGTERM; uvicorn takes SIGINT over while it runs.
    unshield(ignore=(signal.SIGINT, signal.SIGHUP))
    configure_logging(config.log_level, config.log_format)
    app = create_app(config, SharedEngines(config.engine, ends))
    server = uvicorn.Server(uvicorn.Config(
        ObservedApp(app, log_inputs=config.log_inputs, worker_pid=os.getpid()), loop="uvloop", http="httptools",
        log_level=config.log_level, access_log=False, log_config=None,
        timeout_graceful_shutdown=config.shutdown_timeout,
    ))
    server.run(sockets=[sock])
