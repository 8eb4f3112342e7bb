"""The wire of Cohere's embed: POST /v2/embed (`cohere.ClientV2.embed`) and /v1/embed (`cohere.Client.embed`).

Request: `texts`, or `images` (data: URIs or http(s) URLs, for a model with a vision tower), or `inputs`,
each `{"content": [part]}` with one part, `{"type": "text", "text": ...}` or `{"type": "image_url",
"image_url": {"url": ...}}`; `model`,
`input_type` (search_document, search_query, classification, clustering, image),
`embedding_types` (float, int8, uint8, binary, ubinary, base64), `truncate` (NONE, START,
END; END by default), `output_dimension`, `max_tokens`, `priority`; v1 sends no `inputs`,
`output_dimension` or `max_tokens`. The answer: `{"id", "embeddings": {"float": [[...]], ...},
"texts", "meta": {"api_version": {"version"}, "billed_units": {"input_tokens"}}, "response_type":
"embeddings_by_type"}`, one list per type asked, in the inputs' order (`texts` lists the texts among
them); a v1 request that names no `embedding_types` gets v1's older shape, `"embeddings": [[...]]` with
"embeddings_floats".

What this server cannot do as Cohere does is refused here by field (InvalidInputError): more than one
part in one input (Cohere's v4 models fuse an input's texts and images into one vector; a CLIP model
embeds each alone: send each part as its own input), more than one of `texts`, `images` and `inputs`,
and an unknown type or truncation. Unknown fields are ignored, as Cohere's SDKs add some.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from rose_embed.compat.inputs import ImageInput, InvalidInputError, NormalisedInput
from rose_embed.compat.openai import MODEL_FIELD_DESCRIPTION, documented
from rose_embed.compat.rerank import RerankMeta

# Cohere's names for its types are this server's `encoding_format` names for the same wire
# values (compat/encoding.py): base64 is the float32 vector's little-endian bytes, binary and
# ubinary the sign bits packed eight to a byte, first dimension in the highest bit.
EMBEDDING_TYPES = ("float", "int8", "uint8", "binary", "ubinary", "base64")
TRUNCATE_MODES = ("NONE", "START", "END")
INPUT_TYPES = ("search_document", "search_query", "classification", "clustering", "image")


class EmbedContent(msgspec.Struct, kw_only=True):
    type: str
    text: str | None = None
    image_url: Any = None


class EmbedInput(msgspec.Struct, kw_only=True):
    content: list[EmbedContent]


class CohereEmbedRequest(msgspec.Struct, kw_only=True):
    """POST /v2/embed and /v1/embed: one of `texts` and `inputs` is required."""

    texts: Annotated[list[str] | None, documented("The texts to embed.", minItems=1)] = None
    inputs: Annotated[list[EmbedInput] | None, documented(
        "v2's other form of the inputs: each input's `content` one part, `{\"type\": \"text\", \"text\": ...}` or "
        "`{\"type\": \"image_url\", \"image_url\": {\"url\": ...}}` (an image: for a model with a vision tower).")] = None
    images: Annotated[list[str] | None, documented(
        "Images to embed, each a data: URI (base64 PNG, JPEG or WebP) or an http(s) URL, for a model with a vision "
        "tower (CLIP).", minItems=1)] = None
    model: Annotated[str | None, documented(MODEL_FIELD_DESCRIPTION)] = None
    input_type: Annotated[str | None, documented(
        "search_query and search_document pick the model's query and document prompts, classification and "
        "clustering prompts of those names; a model without prompts embeds every type alike; image, for "
        "images, applies no prompt.",
        enum=list(INPUT_TYPES))] = None
    embedding_types: Annotated[list[str] | None, documented(
        "The forms to answer with (default float): float and base64 for every model; int8, uint8, binary and "
        "ubinary only for a model that defines its own quantisation.",
        items={"type": "string", "enum": list(EMBEDDING_TYPES)})] = None
    truncate: Annotated[str | None, documented(
        "Inputs over the model's limit: END (default) cuts their end, NONE refuses them with a 400; START is "
        "refused.", enum=list(TRUNCATE_MODES))] = None
    output_dimension: Annotated[int | None, documented(
        "Cut vectors to this many dimensions (Matryoshka; float re-normalised).", minimum=1)] = None
    max_tokens: Annotated[int | None, documented(
        "Accepted at or above the model's limit (which cuts every input anyway); a lower one is refused.",
        minimum=1)] = None
    priority: Annotated[int | None, documented("Accepted and ignored: one first-come-first-served queue.")] = None


class EmbeddingsByType(msgspec.Struct, kw_only=True, omit_defaults=True, rename={"float_": "float"}):
    float_: list[list[float]] | None = None
    int8: list[list[int]] | None = None
    uint8: list[list[int]] | None = None
    binary: list[list[int]] | None = None
    ubinary: list[list[int]] | None = None
    base64: list[str] | None = None


class CohereEmbedResponse(msgspec.Struct, kw_only=True):
    """v2's answer, and v1's when it names `embedding_types`."""

    id: str
    embeddings: EmbeddingsByType
    texts: list[str]
    meta: RerankMeta
    response_type: str = "embeddings_by_type"


class CohereEmbedFloatsResponse(msgspec.Struct, kw_only=True):
    """v1's answer to a request that names no `embedding_types`."""

    id: str
    embeddings: list[list[float]]
    texts: list[str]
    meta: RerankMeta
    response_type: str = "embeddings_floats"


def inputs_of(request: CohereEmbedRequest, max_inputs: int) -> tuple[NormalisedInput, str]:
    """The texts (or, where any is an image, the texts and images in order) to embed, and the field that
    held them."""
    given = [name for name in ("texts", "images", "inputs") if getattr(request, name) is not None]
    if len(given) > 1:
        raise InvalidInputError(f"give the inputs in one of 'texts', 'images' and 'inputs', not in {' and '.join(given)}",
                                given[-1])
    if not given:
        raise InvalidInputError("'texts' is required: the texts to embed (or 'images', or 'inputs')", "texts")
    param = given[0]
    items = getattr(request, param)
    if not items:
        raise InvalidInputError(f"'{param}' must not be an empty array", param)
    if len(items) > max_inputs:
        raise InvalidInputError(f"'{param}' holds {len(items)} items; at most {max_inputs} are allowed per request",
                                param)
    if param == "texts":
        return NormalisedInput(texts=items), param
    if param == "images":
        return NormalisedInput(items=[_image_of(i, url, param) for i, url in enumerate(items)]), param
    parts = [_part_of(i, item) for i, item in enumerate(items)]
    if all(isinstance(part, str) for part in parts):
        return NormalisedInput(texts=parts), param
    return NormalisedInput(items=parts), param


def _image_of(index: int, url: object, param: str) -> ImageInput:
    if not isinstance(url, str) or not url:
        raise InvalidInputError(f"'{param}[{index}]' must be an image's data: URI or http(s) URL", param)
    return ImageInput(url)


def _part_of(index: int, item: EmbedInput) -> str | ImageInput:
    parts = item.content
    if len(parts) == 1 and parts[0].type == "text" and parts[0].text is not None:
        return parts[0].text
    if len(parts) == 1 and parts[0].type == "image_url":
        url = parts[0].image_url
        return _image_of(index, url.get("url") if isinstance(url, dict) else url, "inputs")
    kinds = ", ".join(part.type for part in parts) or "none"
    raise InvalidInputError(f"'inputs[{index}]' must hold exactly one part, a text ({{\"type\": \"text\", \"text\": "
                            f"...}}) or an image ({{\"type\": \"image_url\", \"image_url\": {{\"url\": ...}}}}); got "
                            f"parts: {kinds} (each text and image is embedded alone: send each part as an input of "
                            "its own)", "inputs")


def embedding_types_of(request: CohereEmbedRequest) -> list[str]:
    """The types asked for, each once, in the order asked (float where none is named)."""
    if request.embedding_types is None:
        return ["float"]
    if not request.embedding_types:
        raise InvalidInputError("'embedding_types' must name at least one type", "embedding_types")
    for name in request.embedding_types:
        if name not in EMBEDDING_TYPES:
            raise InvalidInputError(f"'embedding_types' must hold only {', '.join(EMBEDDING_TYPES)}; got {name!r}",
                                    "embedding_types")
    return list(dict.fromkeys(request.embedding_types))


def long_inputs_mode_of(truncate: str | None) -> str:
    """Cohere's `truncate` -> this server's long-inputs mode."""
    if truncate is None or truncate == "END":
        return "truncate"
    if truncate == "NONE":
        return "error"
    if truncate == "START":
        raise InvalidInputError("'truncate' START is not supported: an input over the model's limit is cut at its "
                                "end (END), as the model's tokenizer cuts it; send END, or NONE to be refused instead",
                                "truncate")
    raise InvalidInputError(f"'truncate' must be one of {', '.join(TRUNCATE_MODES)}; got {truncate!r}", "truncate")


def check_input_type(input_type: str | None) -> None:
    """One of Cohere's input types (which prompt a text one picks is the server's business)."""
    if input_type is not None and input_type not in INPUT_TYPES:
        raise InvalidInputError(f"'input_type' must be one of {', '.join(INPUT_TYPES)}; got {input_type!r}",
                                "input_type")
