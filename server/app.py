"""The Litestar application factory (no module globals: everything hangs off app.state)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from litestar import Litestar
from litestar.config.cors import CORSConfig
from litestar.datastructures import State

from engine.memory import HeapTrimmer
from server.auth import api_key_guard
from server.config import ServerConfig
from server.docs_page import docs_assets
from server.errors import error_response
from server.openapi import openapi_config
from server.metrics import Metrics, metrics_endpoint
from server.contextualized import ROUTES as CONTEXTUALIZED_ROUTES
from server.routes import ROUTES
from server.runtime import Runtime
from server.token_inputs import TokenInputs

if TYPE_CHECKING:  # a front end that serves engine processes never imports torch
    from engine.rose.engine import Engine


def create_app(config: ServerConfig, engine: Engine | None = None) -> Litestar:
    """Build the app; the model loads in the lifespan unless an engine is passed in."""
    runtime = Runtime(config, engine)
    metrics = Metrics(runtime)
    runtime.batch_listeners.append(metrics.observe_batch)
    runtime.batch_listeners.append(HeapTrimmer().maybe_trim)  # see engine/memory.py

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        metrics.start_publishing()
        runtime.start()
        if config.worker_index:
            # Front ends past the first start listening only once they can serve, so that no
            # connection reaches one that is still loading (server/front_end.py).
            await runtime.loaded()
        try:
            yield
        finally:
            await runtime.stop()
            metrics.stop_publishing()

    return Litestar(
        route_handlers=[*ROUTES, *CONTEXTUALIZED_ROUTES, metrics_endpoint, docs_assets()],
        lifespan=[lifespan],
        state=State({"runtime": runtime, "token_inputs": TokenInputs(config), "metrics": metrics}),
        request_max_body_size=config.max_body_bytes,
        cors_config=CORSConfig(allow_origins=list(config.cors_origins)) if config.cors_origins else None,
        exception_handlers={Exception: error_response},
        guards=[api_key_guard(config.api_keys)] if config.api_keys else [],
        logging_config=None,  # server/logs.py configures logging; Litestar's default would replace it
        openapi_config=openapi_config(has_api_keys=bool(config.api_keys)),
    )
