"""The wire of Cohere's embed: POST /v2/embed (`cohere.ClientV2.embed`) and /v1/embed (`cohere.Client.embed`).

Request: `texts` (or `inputs`, each `{"content": [{"type": "text", "text": ...}]}`), `model`,
`input_type` (search_document, search_query, classification, clustering, image),
`embedding_types` (float, int8, uint8, binary, ubinary, base64), `truncate` (NONE, START,
END; END by default), `output_dimension`, `max_tokens`, `priority`; v1 sends no `inputs`,
`output_dimension` or `max_tokens`. The answer: `{"id", "embeddings": {"float": [[...]], ...},
"texts", "meta": {"api_version": {"version"}, "billed_units": {"input_tokens"}}, "response_type":
"embeddings_by_type"}`, one list per type asked, in the texts' order; a v1 request that names no
`embedding_types` gets v1's older shape, `"embeddings": [[...]]` with "embeddings_floats".

What this server cannot do as Cohere does is refused here by field (InvalidInputError): images
(`images`, an `inputs` part that is no text, `input_type` image), more than one text part in one
input, and an unknown type or truncation. Unknown fields are ignored, as Cohere's SDKs add some.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from rose_embed.compat.inputs import InvalidInputError
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
        "v2's other form of the texts: each input's `content` one part, `{\"type\": \"text\", \"text\": ...}` "
        "(images are refused).")] = None
    images: Annotated[list[str] | None, documented("Refused: this server embeds text only.")] = None
    model: Annotated[str | None, documented(MODEL_FIELD_DESCRIPTION)] = None
    input_type: Annotated[str | None, documented(
        "search_query and search_document pick the model's query and document prompts, classification and "
        "clustering prompts of those names; a model without prompts embeds every type alike; image is refused.",
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


def texts_of(request: CohereEmbedRequest, max_inputs: int) -> tuple[list[str], str]:
    """The texts to embed and the field that held them."""
    if request.images is not None:
        raise InvalidInputError("'images' cannot be embedded: this server embeds text only; send 'texts'", "images")
    if request.texts is not None and request.inputs is not None:
        raise InvalidInputError("give the texts as either 'texts' or 'inputs', not both", "inputs")
    if request.inputs is not None:
        texts, param = [_text_of(i, item) for i, item in enumerate(request.inputs)], "inputs"
    elif request.texts is not None:
        texts, param = request.texts, "texts"
    else:
        raise InvalidInputError("'texts' is required: the texts to embed", "texts")
    if not texts:
        raise InvalidInputError(f"'{param}' must not be an empty array", param)
    if len(texts) > max_inputs:
        raise InvalidInputError(f"'{param}' holds {len(texts)} items; at most {max_inputs} are allowed per request",
                                param)
    return texts, param


def _text_of(index: int, item: EmbedInput) -> str:
    parts = item.content
    if len(parts) != 1 or parts[0].type != "text" or parts[0].text is None:
        kinds = ", ".join(part.type for part in parts) or "none"
        raise InvalidInputError(f"'inputs[{index}]' must hold exactly one part, of type text with its 'text' "
                                f"(this server embeds text only); got parts: {kinds}", "inputs")
    return parts[0].text


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
    """One of Cohere's input types, and a text one (which prompt it picks is the server's business)."""
    if input_type == "image":
        raise InvalidInputError("'input_type' image is not supported: this server embeds text only", "input_type")
    if input_type is not None and input_type not in INPUT_TYPES:
        raise InvalidInputError(f"'input_type' must be one of {', '.join(INPUT_TYPES[:-1])}; got {input_type!r}",
                                "input_type")
