"""One front end: HTTP, validation, templating, tokenization, splitting a request into pieces and
encoding the answers, served on a socket the supervisor bound, over links to every engine
process (server/links/engine_links.py).

With one front end it runs in the supervisor's own process (`run_front_end`); with several,
each runs in a spawned process of its own (`run_front_end_process`), all on the one port
(SO_REUSEPORT: the kernel spreads new connections over their sockets). The first front end
listens at once and, while the engines warm up, answers 503 on /health; the others listen
only once they are ready (their lifespan waits for the engines, and a bound socket that
does not listen gets no connections), so whichever front end answers a 200 can serve.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
from collections.abc import Callable
from contextlib import nullcontext
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING

from rose_embed.engine.contract.child_signals import unshield
from rose_embed.engine.contract.memory import keep_freed_memory
from rose_embed.server.links.engine_ends import EngineEnds
from rose_embed.engine.contract.parent_watch import exit_with_parent
from rose_embed.server.config import ServerConfig, load_specs
from rose_embed.server.processes.descriptor_limit import make_room_for_connections
from rose_embed.server.metrics.stats_board import remove_board_dir
from rose_embed.server.processes.stop_signal import StopSignal

if TYPE_CHECKING:  # imported where the app is built, with stop signals deferred (run_front_end)
    from rose_embed.server.http.middleware import ObservedApp

logger = logging.getLogger("rose_embed.server")


def run_front_end(config: ServerConfig, sock: socket.socket, ends: list[EngineEnds], stop: StopSignal | None = None,
                  restarts: Connection | None = None) -> None:
    """Serve until a signal stops uvicorn (it drains in-flight requests, then tells the engines
    this front end is done). `stop`: the supervisor's handler of the stop signals until uvicorn
    takes them over (server/processes/stop_signal.py). `restarts`: where the supervisor sends the ends to
    restarted engines (server/links/reattach.py)."""
    # A stop signal while the front end's libraries import and its app is built is noted and
    # raised once they are done: raised inside them, it could come out as another error.
    starting = stop.deferred() if stop is not None else nullcontext()
    keep_freed_memory()  # a large request's megabytes of buffers are reused by the next one
    with starting:
        server = _uvicorn_server(config, sock, ends, stop.pending if stop is not None else None, restarts)
    # After a graceful shutdown uvicorn re-raises the signal that asked for it: SIGTERM ends the
    # process with its status, SIGINT arrives as KeyboardInterrupt (the CLI then ends by SIGINT).
    server.run(sockets=[sock])


def _uvicorn_server(config: ServerConfig, sock: socket.socket, ends: list[EngineEnds],
                    pending_stop: Callable[[], int | None] | None, restarts: Connection | None = None):
    """The front end's app in uvicorn's Server, ready to run."""
    # uvicorn imports its event loop's module before it takes the signals over; that import
    # then finds it loaded rather than running where a signal would be raised.
    import uvloop  # noqa: F401

    from rose_embed.compat.tiktoken_ids import TiktokenUnavailableError
    from rose_embed.engine.model_files.model_view import ModelView
    from rose_embed.server.links.admission_board import AdmissionBoard
    from rose_embed.server.app import create_app
    from rose_embed.server.links.engine_links import EngineLinks
    from rose_embed.server.http.middleware import ObservedApp
    from rose_embed.server.http.pending_stop_server import uvicorn_server

    models = [ModelView(spec) for spec in load_specs(config)]
    board = (AdmissionBoard.attach(config.admission_board, config.frontend_workers)
             if config.admission_board is not None else None)
    engines = EngineLinks(ends, stall_timeout=config.engine_stall_timeout, max_queued_tokens=config.max_queued_tokens,
                          queue_seconds=config.max_queue_seconds, admission_board=board, slot=config.worker_index,
                          scheduling=config.engine.scheduling, stall_floor=config.engine_stall_floor,
                          max_batch_tokens=config.engine.max_batch_tokens, restarts=restarts)
    try:
        app = create_app(config, engines=engines, model=models)
    except TiktokenUnavailableError as exc:
        sys.exit(f"rose-embed: {exc}")
    make_room_for_connections(config.max_connections)
    worker_pid = os.getpid() if config.frontend_workers > 1 else None
    observed = ObservedApp(app, log_inputs=config.log_inputs, worker_pid=worker_pid,
                           request_timeout=config.request_timeout)
    return uvicorn_server(uvicorn_config(observed, config), pending_stop)


def uvicorn_config(app: ObservedApp, config: ServerConfig):
    """uvicorn's settings for a front end serving `app`."""
    import uvicorn

    from rose_embed.server.http.guarded_http import HttpLimits, guarded_protocol

    limits = HttpLimits(config.max_header_bytes, config.header_timeout, config.max_connections)
    http = guarded_protocol(limits, app.metrics.count_refused) if config.http_protocol == "guarded" else "httptools"
    return uvicorn.Config(
        app, loop="uvloop", http=http,
        log_level=config.log_level, access_log=False, log_config=None,
        timeout_graceful_shutdown=config.shutdown_timeout, timeout_keep_alive=config.keep_alive_timeout,
    )


def run_front_end_process(config: ServerConfig, sock: socket.socket, ends: list[EngineEnds],
                          parent_pid: int, restarts: Connection | None = None) -> None:
    """The main function of a spawned front end."""
    exit_with_parent(parent_pid, lambda: _stop_orphan(parent_pid, config.stats_dir))
    from rose_embed.server.http.logs import configure_logging

    # The supervisor passes Ctrl-C and a hang-up on as SIGTERM; uvicorn takes SIGINT over while it runs.
    unshield(ignore=(signal.SIGINT, signal.SIGHUP))
    configure_logging(config.log_level, config.log_format)
    run_front_end(config, sock, ends, restarts=restarts)


def _stop_orphan(parent_pid: int, stats_dir: str | None) -> None:
    """A supervisor killed outright (SIGKILL) cannot stop its front ends; they stop themselves
    (gracefully, as on SIGTERM) rather than keep the port as orphans, nor leave the stats board."""
    logger.error("the supervisor (pid %d) is gone; shutting down", parent_pid)
    if stats_dir is not None:
        remove_board_dir(stats_dir)
    os.kill(os.getpid(), signal.SIGTERM)
