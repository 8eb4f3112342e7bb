"""The OpenAPI document: what Litestar cannot infer on its own.

The routes decode their bodies themselves (strict msgspec decoding), so Litestar sees no `data`
parameter and would publish them without a request body: each route's declaration names the
Struct it decodes with (server/http/route_spec.py), published from that Struct
(server/http/openapi_schema.py). Every route's error responses are declared with OpenAI's
envelope instead of Litestar's own 400 shape.
"""

from __future__ import annotations

from litestar.openapi import OpenAPIConfig, ResponseSpec
from litestar.openapi.spec import Components, SecurityScheme
from litestar.router import Router

from rose_embed.compat.openai import ErrorResponse
from rose_embed.server.http.docs_page import DOCS_ACCESS, docs_page


def _error(description: str) -> ResponseSpec:
    return ResponseSpec(data_container=ErrorResponse, description=description, generate_examples=False)


# Declared on every route; they replace Litestar's default 400 schema, which is not what we send.
ERROR_RESPONSES = {
    400: _error("Invalid request (OpenAI's error envelope)"),
    401: _error("Missing or wrong API key (when the server has keys)"),
    404: _error("Unknown model or route"),
    503: _error("The model is still loading"),
}
# The security of an operation that answers without a key (/health): an empty requirement, which
# overrides the document's bearer one where the server has keys (OpenAPI 3.1, Security Requirement).
NO_KEY_NEEDED = [{}]
EMBEDDINGS_ERROR_RESPONSES = {**ERROR_RESPONSES, 429: _error("The queue is full; retry after Retry-After seconds")}


def openapi_config(has_api_keys: bool) -> OpenAPIConfig:
    """Docs page at /docs, the document at /docs/openapi.json."""
    components = Components()
    security = None
    if has_api_keys:
        components.security_schemes = {"BearerAuth": SecurityScheme(type="http", scheme="bearer")}
        security = [{"BearerAuth": []}]
    # The docs' own routes, declared open as the docs are (server/http/auth.py).
    router = Router("/docs", route_handlers=[], include_in_schema=False, dto=None, return_dto=None, opt=DOCS_ACCESS)
    return OpenAPIConfig(title="rose-embed", version="0.1.0", path="/docs", components=components, security=security,
                         render_plugins=[docs_page()], openapi_router=router)
