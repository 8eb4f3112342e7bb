"""The Litestar application factory (no module globals: everything hangs off app.state)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from litestar import Litestar
from litestar.datastructures import State
from litestar.openapi import OpenAPIConfig

from engine.engine import Engine
from server.config import ServerConfig
from server.errors import error_response
from server.routes import ROUTES
from server.runtime import Runtime


def create_app(config: ServerConfig, engine: Engine | None = None) -> Litestar:
    """Build the app; the model loads in the lifespan unless an engine is passed in."""
    runtime = Runtime(config, engine)

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        runtime.start()
        try:
            yield
        finally:
            await runtime.stop()

    return Litestar(
        route_handlers=ROUTES,
        lifespan=[lifespan],
        state=State({"runtime": runtime}),
        exception_handlers={Exception: error_response},
        openapi_config=OpenAPIConfig(title="rose-embed", version="0.1.0", path="/docs"),
    )
