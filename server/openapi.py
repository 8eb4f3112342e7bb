"""The OpenAPI document: what Litestar cannot infer on its own.

`POST /v1/embeddings` decodes its body itself (strict msgspec decoding), so Litestar sees
no `data` parameter and would publish the operation without a request body; its `input`
field is also typed `Any` in the Struct, because msgspec cannot express OpenAI's union of
array types. The request schema is therefore written here by hand, and every route's
error responses are declared with OpenAI's envelope instead of Litestar's own 400 shape.
"""

from __future__ import annotations

from dataclasses import dataclass

from litestar.openapi import OpenAPIConfig, ResponseSpec
from litestar.openapi.spec import (
    Components,
    OpenAPIMediaType,
    OpenAPIType,
    Operation,
    RequestBody,
    Schema,
    SecurityScheme,
)

from compat.contextualized import MAX_CHUNKS, MAX_DOCUMENTS
from compat.encoding import ENCODING_FORMATS
from compat.inputs import MAX_INPUTS
from compat.openai import ErrorResponse
from server.docs_page import docs_page

_TOKEN_IDS = Schema(type=OpenAPIType.ARRAY, items=Schema(type=OpenAPIType.INTEGER), min_items=1)

EMBEDDING_REQUEST_SCHEMA = Schema(
    title="EmbeddingRequest",
    type=OpenAPIType.OBJECT,
    required=["input"],
    properties={
        "input": Schema(
            description="Text or token ids to embed: a string, an array of strings, an array of token ids, "
            f"or an array of token-id arrays (at most {MAX_INPUTS} items).",
            one_of=[
                Schema(type=OpenAPIType.STRING),
                Schema(type=OpenAPIType.ARRAY, items=Schema(type=OpenAPIType.STRING), min_items=1,
                       max_items=MAX_INPUTS),
                _TOKEN_IDS,
                Schema(type=OpenAPIType.ARRAY, items=_TOKEN_IDS, min_items=1, max_items=MAX_INPUTS),
            ],
        ),
        "model": Schema(type=OpenAPIType.STRING, description="The served model's name or one of its aliases."),
        "encoding_format": Schema(type=OpenAPIType.STRING, enum=list(ENCODING_FORMATS), default="float"),
        "dimensions": Schema(type=OpenAPIType.INTEGER, minimum=1,
                             description="Cut vectors to this many dimensions (re-normalised)."),
        "user": Schema(type=OpenAPIType.STRING, description="Accepted and ignored, as a hint for abuse tracking."),
    },
)


_CHUNKS = Schema(type=OpenAPIType.ARRAY, items=Schema(type=OpenAPIType.STRING, min_length=1), min_items=1,
                 description="A document's chunks, in order.")
_DOCUMENTS = Schema(type=OpenAPIType.ARRAY, items=_CHUNKS, min_items=1, max_items=MAX_DOCUMENTS,
                    description=f"Documents, each an array of its chunks (at most {MAX_DOCUMENTS} documents and "
                                f"{MAX_CHUNKS} chunks in all; no empty strings).")

CONTEXTUALIZED_REQUEST_SCHEMA = Schema(
    title="ContextualizedEmbeddingRequest",
    type=OpenAPIType.OBJECT,
    description="Perplexity's contract (`input`, `dimensions`, `encoding_format`), or Voyage AI's spelling "
                "(`inputs`, `output_dimension`, `output_dtype`). One of `input` and `inputs` is required.",
    properties={
        "input": _DOCUMENTS,
        "inputs": _DOCUMENTS,
        "model": Schema(type=OpenAPIType.STRING, description="The served model's name or one of its aliases."),
        "dimensions": Schema(type=OpenAPIType.INTEGER, minimum=1, description="Cut vectors to this many dimensions."),
        "output_dimension": Schema(type=OpenAPIType.INTEGER, minimum=1, description="Voyage's name for `dimensions`."),
        "encoding_format": Schema(type=OpenAPIType.STRING, description=(
            "What /v1/embeddings takes (float, base64; a quantising model also int8, uint8, binary, ubinary, "
            "base64_int8, base64_binary); default: base64_int8 for a quantising model, else float. With "
            "`output_dtype`: null or base64.")),
        "output_dtype": Schema(type=OpenAPIType.STRING, enum=["float", "int8", "uint8", "binary", "ubinary"],
                               description="Voyage's number type."),
        "input_type": Schema(type=OpenAPIType.STRING, description="A prompt of the model's (query, document)."),
    },
)


@dataclass
class ContextualizedOperation(Operation):
    """The hand-written request body of /v1/contextualizedembeddings (inline, as EmbeddingsOperation's)."""

    def __post_init__(self) -> None:
        self.request_body = RequestBody(
            required=True, content={"application/json": OpenAPIMediaType(schema=CONTEXTUALIZED_REQUEST_SCHEMA)}
        )


@dataclass
class EmbeddingsOperation(Operation):
    """Adds the hand-written request body to the embeddings operation.

    The schema is inline: Litestar rebuilds `components.schemas` from its own registry, so a
    component added through OpenAPIConfig would be dropped and a reference to it would dangle.
    """

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
