"""The OpenAPI document: what Litestar cannot infer on its own.

`POST /v1/embeddings` and `/v1/contextualizedembeddings` decode their bodies themselves (strict
msgspec decoding), so Litestar sees no `data` parameter and would publish them without a request
body. Their request schemas are therefore generated here from the same Structs the routes decode
with (server/http/openapi_schema.py), and every route's error responses are declared with OpenAI's
envelope instead of Litestar's own 400 shape.
"""

from __future__ import annotations

from dataclasses import dataclass

from litestar.openapi import OpenAPIConfig, ResponseSpec
from litestar.openapi.spec import (
    Components,
    OpenAPIMediaType,
    Operation,
    RequestBody,
    SecurityScheme,
)

from rose_embed.compat.contextualized import ContextualizedEmbeddingRequest
from rose_embed.compat.openai import EmbeddingRequest, ErrorResponse
from rose_embed.server.http.docs_page import docs_page
from rose_embed.server.http.openapi_schema import struct_schema

EMBEDDING_REQUEST_SCHEMA = struct_schema(EmbeddingRequest)
CONTEXTUALIZED_REQUEST_SCHEMA = struct_schema(ContextualizedEmbeddingRequest)


@dataclass
class ContextualizedOperation(Operation):
    """Adds the request body to the contextualized embeddings operation."""

    def __post_init__(self) -> None:
        self.request_body = RequestBody(
            required=True, content={"application/json": OpenAPIMediaType(schema=CONTEXTUALIZED_REQUEST_SCHEMA)}
        )


@dataclass
class EmbeddingsOperation(Operation):
    """Adds the request body to the embeddings operation."""

    def __post_init__(self) -> None:
        self.request_body = RequestBody(
            required=True, content={"application/json": OpenAPIMediaType(schema=EMBEDDING_REQUEST_SCHEMA)}
        )


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
    return OpenAPIConfig(title="rose-embed", version="0.1.0", path="/docs", components=components, security=security,
                         render_plugins=[docs_page()])
