"""The wire of POST /v1/contextualizedembeddings: Perplexity's contract, and Voyage AI's spelling of it.

Perplexity (pplx-embed-context): `input` is a list of documents, each a list of its chunks
in order; `model`, `dimensions`, `encoding_format`; at most 512 documents and 16,000 chunks,
no empty strings. The answer is a list per document of one embedding per chunk:
{"object": "list", "data": [{"object": "list", "index": i, "data": [{"object": "embedding",
"index": j, "embedding": ...}]}], "model", "usage": {"prompt_tokens", "total_tokens"}}.

Voyage AI (voyage-context-3) posts the same documents as `inputs`, the size as
`output_dimension`, and the number type as `output_dtype` (float, int8, uint8, binary,
ubinary) with `encoding_format` null or "base64"; it reads the same answer.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from rose_embed.compat.inputs import InvalidInputError
from rose_embed.compat.openai import (
    INPUT_TYPE_DESCRIPTION,
    MODEL_FIELD_DESCRIPTION,
    PROMPT_NAME_DESCRIPTION,
    Embedding,
    Usage,
    documented,
)

MAX_DOCUMENTS = 512
MAX_CHUNKS = 16_000
# Voyage's output_dtype with encoding_format "base64" -> this server's encoding_format.
_VOYAGE_BASE64 = {"float": "base64", "int8": "base64_int8", "ubinary": "base64_binary"}
VOYAGE_DTYPES = ("float", "int8", "uint8", "binary", "ubinary")


_CHUNKS = {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1,
           "description": "A document's chunks, in order."}
_DOCUMENTS = documented(
    f"Documents, each an array of its chunks (at most {MAX_DOCUMENTS} documents and {MAX_CHUNKS} chunks in all; "
    "no empty strings). One of `input` and `inputs` is required.",
    type="array", items=_CHUNKS, minItems=1, maxItems=MAX_DOCUMENTS)


class ContextualizedEmbeddingRequest(msgspec.Struct, kw_only=True):
    """Perplexity's contract (`input`, `dimensions`, `encoding_format`), or Voyage AI's spelling
    (`inputs`, `output_dimension`, `output_dtype`). One of `input` and `inputs` is required;
    unknown fields are ignored, as clients may add some."""

    # list[list[str]]; checked by `documents_of`, which names the field in its 400
    input: Annotated[Any, _DOCUMENTS] = None
    inputs: Annotated[Any, _DOCUMENTS] = None  # Voyage's name for `input`
    model: Annotated[str | None, documented(MODEL_FIELD_DESCRIPTION)] = None
    dimensions: Annotated[int | None, documented("Cut vectors to this many dimensions.", minimum=1)] = None
    output_dimension: Annotated[int | None, documented("Voyage's name for `dimensions`.", minimum=1)] = None
    # None: the model's own default (`default_encoding_format`)
    encoding_format: Annotated[str | None, documented(
        "What /v1/embeddings takes (float, base64; a quantising model also int8, uint8, binary, ubinary, "
        "base64_int8, base64_binary); default: base64_int8 for a quantising model, else float. With "
        "`output_dtype`: null or base64.")] = None
    output_dtype: Annotated[str | None, documented("Voyage's number type.", enum=[*VOYAGE_DTYPES, None])] = None
    input_type: Annotated[str | None, documented(INPUT_TYPE_DESCRIPTION)] = None
    prompt_name: Annotated[str | None, documented(PROMPT_NAME_DESCRIPTION)] = None
    # engine/text/late_chunking.py reads it
    long_inputs: Annotated[str | None, documented(
        "A chunk too long for a window by itself: truncate, chunk or error; default: the server's "
        "--long-inputs.")] = None
    user: Annotated[str | None, documented("Accepted and ignored.")] = None


class DocumentEmbeddings(msgspec.Struct, kw_only=True):
    index: int
    data: list[Embedding]
    object: str = "list"


class ContextualizedEmbeddingResponse(msgspec.Struct, kw_only=True):
    data: list[DocumentEmbeddings]
    model: str
    usage: Usage
    object: str = "list"


def documents_of(request: ContextualizedEmbeddingRequest) -> tuple[list[list[str]], str]:
    """The documents and the field they came in ("input" or "inputs"); InvalidInputError naming it."""
    if request.input is not None and request.inputs is not None:
        raise InvalidInputError("give the documents as either 'input' or 'inputs', not both", "inputs")
    param = "inputs" if request.inputs is not None else "input"
    value = request.inputs if request.inputs is not None else request.input
    if not isinstance(value, list) or not value:
        got = "an empty array" if value == [] else "null" if value is None else type(value).__name__
        raise InvalidInputError(f"'{param}' must be a non-empty array of documents, each an array of its chunks "
                                f"(strings) in order; got {got}", param)
    if len(value) > MAX_DOCUMENTS:
        raise InvalidInputError(f"'{param}' holds {len(value)} documents; at most {MAX_DOCUMENTS} are allowed "
                                "per request", param)
    num_chunks = 0
    for i, document in enumerate(value):
        if not isinstance(document, list) or not document:
            got = "an empty array" if document == [] else type(document).__name__ if document is not None else "null"
            raise InvalidInputError(f"'{param}[{i}]' must be a non-empty array of the document's chunks (strings); "
                                    f"got {got}", param)
        for j, chunk in enumerate(document):
            if not isinstance(chunk, str):
                raise InvalidInputError(f"'{param}[{i}][{j}]' must be a string; got "
                                        f"{type(chunk).__name__ if chunk is not None else 'null'}", param)
            if not chunk:
                raise InvalidInputError(f"'{param}[{i}][{j}]' is an empty string; empty chunks are not allowed",
                                        param)
        num_chunks += len(document)
    if num_chunks > MAX_CHUNKS:
        raise InvalidInputError(f"'{param}' holds {num_chunks} chunks in all; at most {MAX_CHUNKS} are allowed "
                                "per request", param)
    return value, param


def dimensions_of(request: ContextualizedEmbeddingRequest) -> tuple[int | None, str]:
    """The asked size and the field it came in ("dimensions" or "output_dimension")."""
    if request.dimensions is not None and request.output_dimension is not None \
            and request.dimensions != request.output_dimension:
        raise InvalidInputError("give the size as either 'dimensions' or 'output_dimension', not both",
                                "output_dimension")
    if request.output_dimension is not None:
        return request.output_dimension, "output_dimension"
    return request.dimensions, "dimensions"


def encoding_format_of(request: ContextualizedEmbeddingRequest, default: str) -> tuple[str, str]:
    """This server's encoding_format (compat/encoding.py's names) and the field that chose it.

    Perplexity's and OpenAI's names come in `encoding_format`. Voyage's `output_dtype` names
    the number type, and its `encoding_format` is null (numbers) or "base64"."""
    dtype, fmt = request.output_dtype, request.encoding_format
    if dtype is None:
        return (default if fmt is None else fmt), "encoding_format"
    if dtype not in VOYAGE_DTYPES:
        raise InvalidInputError(f"'output_dtype' must be one of {', '.join(VOYAGE_DTYPES)}; got {dtype!r}",
                                "output_dtype")
    if fmt is None or fmt == dtype:
        return dtype, "output_dtype"
    if fmt == "base64" and dtype in _VOYAGE_BASE64:
        return _VOYAGE_BASE64[dtype], "output_dtype"
    raise InvalidInputError(f"'output_dtype' {dtype!r} with 'encoding_format' {fmt!r} is not a format this server "
                            f"writes; base64 goes with {', '.join(_VOYAGE_BASE64)}", "encoding_format")
