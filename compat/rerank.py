"""msgspec Structs for reranking: Cohere's and Jina's wire format (vLLM's too), and TEI's.

One request Struct takes every dialect's fields: Cohere's v1 / v2 and Jina's (`query`,
`documents` as strings or {"text": ...}, `top_n`, `return_documents`, `max_tokens_per_doc`) and
TEI's (`query`, `texts`, `raw_scores`, `return_text`, `truncate`). A body with `texts` and no
`documents` is TEI's and gets TEI's answer, a bare list of {index, score, text?}; any other
gets Cohere's shape, which Jina's and vLLM's clients read too: `results` sorted by
`relevance_score` with each document's original `index`, `document.text` when asked, and
`usage.total_tokens`. Unknown fields are ignored, as clients add their own.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from rose_embed.compat.inputs import InvalidInputError
from rose_embed.compat.openai import MODEL_FIELD_DESCRIPTION, documented


class RerankDocument(msgspec.Struct, kw_only=True):
    text: str


class RerankRequest(msgspec.Struct, kw_only=True):
    """POST /v1/rerank, /v2/rerank and /rerank."""

    query: Annotated[str, documented("The search query every document is scored against.")]
    documents: Annotated[list[str | RerankDocument] | None, documented(
        "The documents to score: strings, or objects with a `text` (Cohere v1, Jina).")] = None
    texts: Annotated[list[str] | None, documented("TEI's name for `documents` (POST /rerank only).")] = None
    model: Annotated[str | None, documented(MODEL_FIELD_DESCRIPTION)] = None
    top_n: Annotated[int | None, documented("Return only the best this many (default: all).", minimum=1)] = None
    return_documents: Annotated[bool, documented("Echo each document's text in its result.")] = False
    max_tokens_per_doc: Annotated[int | None, documented(
        "Cut each document to this many of its tokens before scoring (default: only the model's limit cuts).",
        minimum=1)] = None
    raw_scores: Annotated[bool, documented("TEI: the logit before the model's activation.")] = False
    return_text: Annotated[bool, documented("TEI's name for `return_documents`.")] = False
    truncate: Annotated[bool | None, documented(
        "TEI: cut a pair over the model's limit (false or absent: a 400 for it, as TEI answers).")] = None
    truncation_direction: Annotated[str, documented("TEI: only Right (the end of the pair is cut).",
                                                    enum=["Right"])] = "Right"


class ResultDocument(msgspec.Struct, kw_only=True):
    text: str


class RerankResult(msgspec.Struct, kw_only=True, omit_defaults=True):
    index: int
    relevance_score: float
    document: ResultDocument | None = None


class RerankUsage(msgspec.Struct, kw_only=True):
    total_tokens: int


class BilledUnits(msgspec.Struct, kw_only=True):
    input_tokens: int


class ApiVersion(msgspec.Struct, kw_only=True):
    version: str


class RerankMeta(msgspec.Struct, kw_only=True):
    api_version: ApiVersion
    billed_units: BilledUnits


class RerankResponse(msgspec.Struct, kw_only=True):
    """Cohere's answer (`id`, `results`, `meta`) with Jina's and vLLM's `model` and `usage`."""

    id: str
    model: str
    results: list[RerankResult]
    usage: RerankUsage
    meta: RerankMeta


class TeiRank(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One entry of TEI's answer, a list sorted by score."""

    index: int
    score: float
    text: str | None = None


def is_tei(request: RerankRequest) -> bool:
    """A TEI body: `texts` and no `documents`."""
    return request.texts is not None and request.documents is None


def documents_of(request: RerankRequest) -> tuple[list[str], str]:
    """The documents' texts and the field that held them; InvalidInputError names a missing or doubled field."""
    if request.documents is not None and request.texts is not None:
        raise InvalidInputError("give the documents as 'documents' or as 'texts' (TEI), not both", "documents")
    if request.documents is not None:
        return [d if isinstance(d, str) else d.text for d in request.documents], "documents"
    if request.texts is not None:
        return list(request.texts), "texts"
    raise InvalidInputError("'documents' is required: the texts to score against the query", "documents")


def ranked(scores: list[float], top_n: int | None) -> list[int]:
    """Document indices, best score first (ties keep the documents' order), the first `top_n`."""
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    return order if top_n is None else order[:top_n]
