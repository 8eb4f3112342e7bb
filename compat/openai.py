"""msgspec Structs for OpenAI's /embeddings and /models wire format.

The request Structs are the OpenAPI document's source too (server/http/openapi.py reads their JSON
Schema), so each field's description lives on its type. Those annotations only document: no
constraint is declared there, so decoding stays as strict as the bare types, and the checks
that name a field in their 400 stay where they are.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from rose_embed.compat.encoding import ENCODING_FORMATS
from rose_embed.compat.inputs import MAX_INPUTS


def documented(description: str, **json_schema: Any) -> msgspec.Meta:
    """A field's description (and further JSON Schema) for the OpenAPI document, with no constraint."""
    return msgspec.Meta(description=description, extra_json_schema=json_schema or None)


_TOKEN_IDS = {"type": "array", "items": {"type": "integer"}, "minItems": 1}
# An image item (a CLIP model's; docs/images.md), in the shape vLLM and Jina accept.
_IMAGE_ITEM = {"type": "object", "required": ["image_url"],
               "properties": {"type": {"enum": ["image_url"]},
                              "image_url": {"anyOf": [{"type": "object", "required": ["url"],
                                                       "properties": {"url": {"type": "string"}}},
                                                      {"type": "string"}]}}}
MODEL_FIELD_DESCRIPTION = ("The served model's name or one of its aliases; with one model served, OpenAI's embedding "
                           "model names too. The answer's `model` is the served model's name.")
PROMPT_NAME_DESCRIPTION = "A prompt of the model's (its config_sentence_transformers.json prompts) put before each text."
INPUT_TYPE_DESCRIPTION = "The same as `prompt_name`, as Voyage, Cohere and NVIDIA clients spell it (query, document)."
# The `model` Infinity's requests (and so its generated client) send when none is named: the default model.
UNNAMED_MODEL = "default/not-specified"
# Infinity's `modality`: what the strings of `input` are. Infinity also has audio, which no model here embeds.
MODALITIES = ("text", "image")


class EmbeddingRequest(msgspec.Struct, kw_only=True):
    """POST /v1/embeddings. Unknown fields are ignored, as OpenAI's SDKs may add some."""

    # str | list[str] | list[int] | list[list[int]]; msgspec cannot express a union of
    # several array types, so compat.inputs checks the shape.
    input: Annotated[Any, documented(
        "Text or token ids to embed: a string, an array of strings, an array of token ids, or an array of "
        f"token-id arrays (at most {MAX_INPUTS} items). For a CLIP model also images, alone or in an array "
        "beside texts: {\"type\": \"image_url\", \"image_url\": {\"url\": \"data:image/png;base64,...\"}} (or an "
        "http(s) URL).",
        oneOf=[{"type": "string"},
               {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": MAX_INPUTS},
               _TOKEN_IDS,
               {"type": "array", "items": _TOKEN_IDS, "minItems": 1, "maxItems": MAX_INPUTS},
               _IMAGE_ITEM,
               {"type": "array", "items": {"anyOf": [{"type": "string"}, _IMAGE_ITEM]}, "contains": _IMAGE_ITEM,
                "minItems": 1, "maxItems": MAX_INPUTS}])]
    model: Annotated[str | None, documented(MODEL_FIELD_DESCRIPTION)] = None
    # A model that quantises (pplx-embed) takes more formats (compat/encoding.py); OpenAI's are listed.
    encoding_format: Annotated[str, documented("float or base64 (little-endian float32).",
                                               enum=list(ENCODING_FORMATS))] = "float"
    dimensions: Annotated[int | None, documented("Cut vectors to this many dimensions (re-normalised).",
                                                 minimum=1)] = None
    user: Annotated[str | None, documented("Accepted and ignored, as a hint for abuse tracking.")] = None
    # Prompts (server/pipeline/prompts.py): a name from the model's config_sentence_transformers.json
    # prompts; `input_type` is the same under the name Voyage / Cohere / NVIDIA clients send.
    prompt_name: Annotated[str | None, documented(PROMPT_NAME_DESCRIPTION)] = None
    input_type: Annotated[str | None, documented(INPUT_TYPE_DESCRIPTION)] = None
    # Inputs over the model's limit: "truncate", "chunk" or "error" (server/pipeline/long_inputs.py);
    # None: the server's --long-inputs.
    long_inputs: Annotated[str | None, documented(
        "Inputs over the model's limit: truncate, chunk (embedded window by window, the vectors averaged) or "
        "error (OpenAI's context-length 400); default: the server's --long-inputs.")] = None
    # vLLM's field: lower is sooner. It sets the request's share of each batch, not an order.
    priority: Annotated[int | None, documented(
        "vLLM's priority: an integer from -10 to 10, lower meaning sooner (default 0). Priority p gets 2^-p "
        "times a default request's share of each batch while both wait; the X-Priority header says the same "
        "for clients that cannot add a field.")] = None
    # A sparse model's extension (docs/sparse.md): its tokens beside their ids, as TEI's return_text.
    return_text: Annotated[bool, documented(
        "Sparse models only: each vector also lists its tokens (`embedding.tokens`, in the order of "
        "`embedding.indices`).")] = False
    # A BGE-M3 model's extension (docs/bge-m3.md): which of its outputs each item holds.
    outputs: Annotated[list[str] | None, documented(
        "BGE-M3 models only: any of dense, sparse and colbert, all computed in one pass of the model; each item "
        "then holds them as `dense`, `sparse` and `colbert` (object multi_output_embedding). Absent: the dense "
        "vector alone, as OpenAI's `embedding`.", items={"enum": ["dense", "sparse", "colbert"]})] = None
    # Infinity's body (its `/embeddings`, and infinity_client's `embeddings`): naming `modality` makes the
    # request Infinity's, whose client sends `dimensions: 0` unless told otherwise (the route reads it).
    modality: Annotated[str | None, documented(
        "Infinity's: what the strings of `input` are. image: each is an image's http(s) URL or data: URI (a CLIP "
        "model's), as on /embeddings_image; text: texts, as without the field. Where it is given, `dimensions` "
        "0 is the whole vector, as in Infinity.",
        enum=list(MODALITIES))] = None


class SparseEmbedding(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A sparse model's vector in /v1/embeddings (not OpenAI's: docs/sparse.md says why): its non-zero
    dimensions (token ids, ascending) and their weights, as Qdrant's SparseVector and Pinecone's
    sparse_values take them."""

    indices: list[int]
    values: list[float]
    tokens: list[str] | None = None  # with return_text


class MultiOutputEmbedding(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A BGE-M3 model's item in /v1/embeddings when the request names `outputs` (docs/bge-m3.md): the outputs
    asked for, each in the shape this server answers it alone (a dense array or base64 string, a sparse
    object, a multi-vector array or base64 string); those not asked for are left out."""

    index: int
    object: str  # "multi_output_embedding"
    dense: list[float] | str | None = None
    sparse: SparseEmbedding | None = None
    colbert: list[list[float]] | str | None = None


class Embedding(msgspec.Struct, kw_only=True):
    index: int
    embedding: list[float] | str | SparseEmbedding
    # "sparse_embedding" where `embedding` is a SparseEmbedding; "multi_vector_embedding" where it holds a
    # ColBERT model's token vectors (compat/multi_vector_wire.py)
    object: str = "embedding"


class Usage(msgspec.Struct, kw_only=True):
    prompt_tokens: int
    total_tokens: int


class EmbeddingResponse(msgspec.Struct, kw_only=True):
    # A BGE-M3 request that names `outputs` gets MultiOutputEmbedding items instead (docs/bge-m3.md); msgspec's
    # types have no untagged union of two Structs to say both: the OpenAPI document adds it
    # (server/routes/embeddings.py's ANSWER).
    data: list[Embedding]
    model: str
    usage: Usage
    object: str = "list"


class Model(msgspec.Struct, kw_only=True):
    id: str
    created: int
    owned_by: str = "rose-embed"
    object: str = "model"
    # "rerank", "classify", "sparse_embedding", "multi_vector_embedding": which routes the model answers (not
    # OpenAI's; clients ignore it)
    kind: str = "embedding"


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
