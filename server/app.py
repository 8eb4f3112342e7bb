"""The Litestar application factory (no module globals: everything hangs off app.state)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from litestar import Litestar
from litestar.config.cors import CORSConfig
from litestar.datastructures import State

from rose_embed.server.http.auth import api_key_guard
from rose_embed.server.config import ServerConfig
from rose_embed.server.http.docs_page import docs_assets
from rose_embed.server.http.errors import error_response
from rose_embed.server.http.openapi import openapi_config
from rose_embed.server.http.route_index import RouteIndex
from rose_embed.server.metrics.prometheus import Metrics
from rose_embed.server.routes.all_routes import ROUTES
from rose_embed.server.runtime import Runtime
from rose_embed.server.pipeline.token_inputs import TokenInputs

if TYPE_CHECKING:  # a front end that serves engine processes never imports torch
    from rose_embed.engine.model_files.model_view import ModelView
    from rose_embed.server.processes.in_process_engine import Engine  # served in this process: tests, programs
    from rose_embed.server.links.engine_links import EngineLinks


def create_app(config: ServerConfig, engine: Engine | list[Engine] | None = None, *,
               engines: EngineLinks | None = None, model: ModelView | list[ModelView] | None = None) -> Litestar:
    """Build the app. `engines` and `model`: the engine processes' links and the models' views, in the
    order of server/config.py's model_configs (the server's front ends); else `engine`, engine objects
    served in this process, one per model (loaded in the lifespan when None)."""
    runtime = Runtime(config, engine, engines, model)
    metrics = Metrics(runtime)

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        metrics.start_publishing()
        runtime.start()
        if config.worker_index:
            # Front ends past the first start listening only once they can serve, so that no
            # connection reaches one that is still loading (server/processes/front_end.py).
            await runtime.loaded()
        try:
            yield
        finally:
            await runtime.stop()
            metrics.stop_publishing()

    return Litestar(
        route_handlers=[*(route.route_handler() for route in ROUTES), docs_assets()],
        lifespan=[lifespan],
        state=State({"runtime": runtime, "token_inputs": TokenInputs(config), "metrics": metrics,
                     "routes": RouteIndex(ROUTES)}),
        request_max_body_size=config.max_body_bytes,
        cors_config=CORSConfig(allow_origins=list(config.cors_origins)) if config.cors_origins else None,
        exception_handlers={Exception: error_response},
        guards=[api_key_guard(config.api_keys, config.protect_metrics_and_docs)] if config.api_keys else [],
        logging_config=None,  # server/http/logs.py configures logging; Litestar's default would replace it
        openapi_config=openapi_config(has_api_keys=bool(config.api_keys)),
    )
