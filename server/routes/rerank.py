"""POST /v1/rerank, /v2/rerank and /rerank: relevance scores through the request pipeline.

The wire is compat/rerank.py's (Cohere's, Jina's and, on /rerank, TEI's). Every (query, document)
pair is one sequence: the pipeline's pair parts (server/pipeline/pair_parts.py) cut the documents into
parts of a few dozen, tokenize each part's pairs as the model's reference builds them and send
them to the same queue and engine as embeddings; the engine hands back [score, raw logit] per pair.
A multi-vector (ColBERT) model scores each document by MaxSim against the query on the device instead
(server/pipeline/colbert_rerank_ask.py), its answer in the same shapes.
"""

from __future__ import annotations

import uuid

from litestar import Request
from litestar.datastructures import State

from rose_embed.compat.rerank import (ApiVersion, BilledUnits, RerankMeta, RerankRequest, RerankResponse, RerankResult,
                           RerankUsage, ResultDocument, TeiRank, documents_of, is_tei, ranked)
from rose_embed.server.config import ServerConfig
from rose_embed.server.http.errors import invalid_request
from rose_embed.server.http.openapi import EMBEDDINGS_ERROR_RESPONSES
from rose_embed.server.http.route_spec import RouteSpec
from rose_embed.server.pipeline.colbert_rerank_ask import ColbertRerankAsk
from rose_embed.server.pipeline.pair_ask import PairAsk
from rose_embed.server.pipeline.serve_request import Answered, RouteSteps, serve_request
from rose_embed.server.pipeline.served_models import MULTI_VECTOR, ServedModel


def _read(data: RerankRequest, model: ServedModel, config: ServerConfig) -> PairAsk | ColbertRerankAsk:
    """Cohere's, Jina's or TEI's body."""
    documents, param = documents_of(data)
    _check(data, documents, param, config)
    if model.kind == MULTI_VECTOR:
        return ColbertRerankAsk(data.query, documents, data.max_tokens_per_doc)

    def refuse_truncated(index: int) -> None:
        raise invalid_request(
            f"'texts[{index}]' and the query together are longer than the model's limit of "
            f"{model.view.spec.max_seq_len} tokens; send \"truncate\": true to have the pair cut, as TEI "
            "asks", "texts", "context_length_exceeded")

    return PairAsk(data.query, documents, data.max_tokens_per_doc,
                   refuse_truncated if is_tei(data) and not data.truncate else None)


def _read_not_tei(data: RerankRequest, model: ServedModel, config: ServerConfig) -> PairAsk | ColbertRerankAsk:
    """Cohere's or Jina's body: TEI's is taken at /rerank only."""
    if is_tei(data):
        raise invalid_request("'documents' is required here; TEI's body (with 'texts') is taken at POST /rerank",
                              "documents")
    return _read(data, model, config)


def _answer(done: Answered) -> RerankResponse | list[TeiRank]:
    data, rows, documents = done.data, done.result, done.ask.documents
    if is_tei(data):
        scores = rows[:, 1 if data.raw_scores else 0].tolist()
        return [TeiRank(index=i, score=scores[i], text=documents[i] if data.return_text else None)
                for i in ranked(scores, data.top_n)]
    scores = rows[:, 0].tolist()
    results = [RerankResult(index=i, relevance_score=scores[i],
                            document=ResultDocument(text=documents[i]) if data.return_documents else None)
               for i in ranked(scores, data.top_n)]
    version = "2" if done.request.url.path.startswith("/v2/") else "1"
    num_tokens = done.num_tokens
    return RerankResponse(
        id=str(uuid.uuid4()), model=done.model.name, results=results, usage=RerankUsage(total_tokens=num_tokens),
        meta=RerankMeta(api_version=ApiVersion(version=version), billed_units=BilledUnits(input_tokens=num_tokens)),
    )


# A reranker, or a ColBERT model (scored by MaxSim): a request naming no model gets the first reranker.
RERANK = RouteSteps(RerankRequest, ("rerank", MULTI_VECTOR), _read_not_tei, _answer)
RERANK_ANY = RouteSteps(RerankRequest, ("rerank", MULTI_VECTOR), _read, _answer)


async def rerank(request: Request, state: State) -> RerankResponse:
    return await serve_request(request, state, RERANK)


async def rerank_any(request: Request, state: State) -> RerankResponse | list[TeiRank]:
    return await serve_request(request, state, RERANK_ANY)


def _check(data: RerankRequest, documents: list[str], param: str, config: ServerConfig) -> None:
    """Everything about the request that can be refused before any tokenizing."""
    limit = config.max_rerank_documents
    if not documents:
        raise invalid_request(f"'{param}' holds no documents; give at least one to score", param)
    if len(documents) > limit:
        raise invalid_request(f"'{param}' holds {len(documents)} documents; at most {limit} are allowed per request "
                              "(send several requests, or start the server with a larger --max-rerank-documents)",
                              param, "too_many_documents")
    if data.top_n is not None and data.top_n < 1:
        raise invalid_request(f"'top_n' must be at least 1; got {data.top_n}", "top_n")
    if data.max_tokens_per_doc is not None and data.max_tokens_per_doc < 1:
        raise invalid_request(f"'max_tokens_per_doc' must be at least 1; got {data.max_tokens_per_doc}",
                              "max_tokens_per_doc")
    if data.truncation_direction != "Right":
        raise invalid_request("'truncation_direction' Left is not supported: a pair is cut as its reference cuts "
                              "it, from the end", "truncation_direction")
    max_chars = config.max_input_chars
    for name, text in (("query", data.query), *((f"{param}[{i}]", d) for i, d in enumerate(documents))):
        if len(text) > max_chars:
            raise invalid_request(f"'{name}' holds {len(text)} characters; at most {max_chars} are allowed per text "
                                  "(or start the server with a larger --max-input-chars)",
                                  name.split("[")[0], "input_too_long")


ROUTES = [
    RouteSpec(rerank, "POST", ("/v1/rerank", "/v2/rerank"), "Rerank documents against a query (Cohere, Jina)",
              EMBEDDINGS_ERROR_RESPONSES, body=RerankRequest),
    RouteSpec(rerank_any, "POST", ("/rerank",), "Rerank documents against a query (Cohere, Jina, or TEI's body)",
              EMBEDDINGS_ERROR_RESPONSES, body=RerankRequest),
]
