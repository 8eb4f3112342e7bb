"""POST /v1/rerank, /v2/rerank and /rerank: relevance scores through the request pipeline.

The wire is compat/rerank.py's (Cohere's, Jina's and, on /rerank, TEI's). Every (query, document)
pair is one sequence: the pipeline's pair parts (server/pipeline/pair_parts.py) cut the documents into
parts of a few dozen, tokenize each part's pairs as the model's reference builds them and send
them to the same queue and engine as embeddings; the engine hands back [score, raw logit] per pair.
"""

from __future__ import annotations

import uuid

import numpy as np
from litestar import Request
from litestar.datastructures import State

from rose_embed.compat.rerank import (ApiVersion, BilledUnits, RerankMeta, RerankRequest, RerankResponse, RerankResult,
                           RerankUsage, ResultDocument, TeiRank, documents_of, is_tei, ranked)
from rose_embed.server.http.errors import invalid_request
from rose_embed.server.pipeline.guards import check_finite, decode_request
from rose_embed.server.pipeline.model_kind import require_reranker
from rose_embed.server.http.openapi import EMBEDDINGS_ERROR_RESPONSES
from rose_embed.server.http.route_spec import RouteSpec
from rose_embed.server.pipeline.pair_parts import pair_parts, pairs_ahead, pairs_cost
from rose_embed.server.routes.support import admitted, compute_parts, pick_model, runtime_of, trace_of
from rose_embed.server.runtime import Runtime

async def rerank(request: Request, state: State) -> RerankResponse:
    data = decode_request(await request.body(), RerankRequest)
    if is_tei(data):
        raise invalid_request("'documents' is required here; TEI's body (with 'texts') is taken at POST /rerank",
                              "documents")
    return await _rerank(request, state, data)


async def rerank_any(request: Request, state: State) -> RerankResponse | list[TeiRank]:
    return await _rerank(request, state, decode_request(await request.body(), RerankRequest))


async def _rerank(request: Request, state: State, data: RerankRequest) -> RerankResponse | list[TeiRank]:
    runtime = runtime_of(state)
    model = pick_model(request, runtime, data.model, "rerank")
    require_reranker(model.view.spec, model.name)
    documents, param = documents_of(data)
    _check(data, documents, param, runtime)
    tei = is_tei(data)
    trace = trace_of(request)
    trace.num_inputs = len(documents)
    trace.texts = [data.query, *documents] if runtime.config.log_inputs else None

    def refuse_truncated(index: int) -> None:
        raise invalid_request(
            f"'texts[{index}]' and the query together are longer than the model's limit of "
            f"{model.view.spec.max_seq_len} tokens; send \"truncate\": true to have the pair cut, as TEI "
            "asks", "texts", "context_length_exceeded")

    parts = pair_parts(runtime, model, data.query, documents, data.max_tokens_per_doc,
                       refuse_truncated if tei and not data.truncate else None)
    cost = pairs_cost(data.query, documents, model.view.spec.max_seq_len)
    with admitted(request, runtime, model, cost) as queued:
        outcome = await compute_parts(request, runtime, trace, parts, model, queued,
                                      parts_ahead=pairs_ahead(runtime))
    rows = np.concatenate(outcome.answers) if outcome.answers else np.zeros((0, 2), np.float32)
    check_finite(rows, trace.request_id)
    if tei:
        scores = rows[:, 1 if data.raw_scores else 0].tolist()
        return [TeiRank(index=i, score=scores[i], text=documents[i] if data.return_text else None)
                for i in ranked(scores, data.top_n)]
    scores = rows[:, 0].tolist()
    results = [RerankResult(index=i, relevance_score=scores[i],
                            document=ResultDocument(text=documents[i]) if data.return_documents else None)
               for i in ranked(scores, data.top_n)]
    version = "2" if request.url.path.startswith("/v2/") else "1"
    return RerankResponse(
        id=str(uuid.uuid4()), model=model.name, results=results, usage=RerankUsage(total_tokens=outcome.num_tokens),
        meta=RerankMeta(api_version=ApiVersion(version=version), billed_units=BilledUnits(input_tokens=outcome.num_tokens)),
    )


def _check(data: RerankRequest, documents: list[str], param: str, runtime: Runtime) -> None:
    """Everything about the request that can be refused before any tokenizing."""
    limit = runtime.config.max_rerank_documents
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
    max_chars = runtime.config.max_input_chars
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
