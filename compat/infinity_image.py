"""The wire of Infinity's image embeddings: POST /embeddings_image (`infinity_client`'s
`embeddings_image`, and any client of Infinity's OpenAPI document).

Request: `input`, an image or an array of them, each an http(s) URL or a data: URI (base64 PNG, JPEG
or WebP); `model` (Infinity's "default/not-specified" is the default model, as no name is, on every route:
server/pipeline/request_context.py);
`encoding_format` (float or base64); `user`; and, beyond Infinity's body, `dimensions` (Matryoshka, as
on /v1/embeddings; 0 or absent for the whole vector). Unknown fields are ignored. The answer is OpenAI's embeddings
list, with Infinity's `id` and `created` beside it.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from rose_embed.compat.inputs import MAX_INPUTS, ImageInput, InvalidInputError, NormalisedInput
from rose_embed.compat.openai import MODEL_FIELD_DESCRIPTION, Embedding, Usage, documented

_IMAGE = {"type": "string", "description": "An http(s) URL or a data: URI (base64 PNG, JPEG or WebP)."}


class InfinityImageRequest(msgspec.Struct, kw_only=True):
    """POST /embeddings_image."""

    # str | list[str]; images_of checks the shape and names the field in its 400.
    input: Annotated[Any, documented(
        "The images to embed: one, or an array of them, each an http(s) URL or a data: URI.",
        oneOf=[_IMAGE, {"type": "array", "items": _IMAGE, "minItems": 1, "maxItems": MAX_INPUTS}])]
    model: Annotated[str | None, documented(MODEL_FIELD_DESCRIPTION)] = None
    encoding_format: Annotated[str, documented("float or base64 (little-endian float32).",
                                               enum=["float", "base64"])] = "float"
    dimensions: Annotated[int | None, documented(
        "Cut vectors to this many dimensions (re-normalised); 0 or absent: the whole vector.", minimum=0)] = None
    user: Annotated[str | None, documented("Accepted and ignored.")] = None


class InfinityEmbeddingResponse(msgspec.Struct, kw_only=True):
    """OpenAI's embeddings list as Infinity answers it."""

    data: list[Embedding]
    model: str
    usage: Usage
    id: str
    created: int
    object: str = "list"


def images_of(value: object, max_inputs: int) -> NormalisedInput:
    """`input` -> its images, in order; InvalidInputError naming what is wrong."""
    urls = [value] if isinstance(value, str) else value
    if not isinstance(urls, list) or not all(isinstance(url, str) and url for url in urls):
        raise InvalidInputError("'input' must be an image's URL or data: URI, or an array of them")
    if not urls:
        raise InvalidInputError("'input' must not be an empty array")
    if len(urls) > max_inputs:
        raise InvalidInputError(f"'input' holds {len(urls)} items; at most {max_inputs} are allowed per request")
    return NormalisedInput(items=[ImageInput(url) for url in urls])
