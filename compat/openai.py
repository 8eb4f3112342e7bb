"""msgspec Structs for OpenAI's /embeddings and /models wire format."""

from __future__ import annotations

from typing import Any

import msgspec


class EmbeddingRequest(msgspec.Struct, kw_only=True):
    """POST /v1/embeddings. Unknown fields are ignored, as OpenAI's SDKs may add some."""

    # str | list[str] | list[int] | list[list[int]]; msgspec cannot express a union of
    # several array types, so compat.inputs checks the shape.
    input: Any
    model: str | None = None
    encoding_format: str = "float"
    dimensions: int | None = None
    user: str | None = None
    # Prompts (server/prompts.py): a name from the model's config_sentence_transformers.json
    # prompts; `input_type` is the same under the name Voyage / Cohere / NVIDIA clients send.
    prompt_name: str | None = None
    input_type: str | None = None
    # Inputs over the model's limit: "truncate", "chunk" or "error" (server/long_inputs.py);
    # None: the server's --long-inputs.
    long_inputs: str | None = None


class Embedding(msgspec.Struct, kw_only=True):
    index: int
    embedding: list[float] | str
    object: str = "embedding"


class Usage(msgspec.Struct, kw_only=True):
    prompt_tokens: int
    total_tokens: int


class EmbeddingResponse(msgspec.Struct, kw_only=True):
    data: list[Embedding]
    model: str
    usage: Usage
    object: str = "list"


class Model(msgspec.Struct, kw_only=True):
    id: str
    created: int
    owned_by: str = "rose-embed"
    object: str = "model"


class ModelList(msgspec.Struct, kw_only=True):
    data: list[Model]
    object: str = "list"


class ErrorDetail(msgspec.Struct, kw_only=True, omit_defaults=False):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(msgspec.Struct, kw_only=True):
    error: ErrorDetail
