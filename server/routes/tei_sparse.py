"""POST /embed_sparse: Hugging Face TEI's sparse embeddings (SPLADE), through the request pipeline.

The wire is compat/tei_sparse.py's; the ask is server/pipeline/sparse_ask.py's, the embeddings ask
whose answer per text is its non-zero (token id, weight) pairs. The route serves sparse encoders
only: a dense embedder or a reranker asked here gets a 400 naming the route that fits (TEI answers
424 for a model without SPLADE pooling; errors here leave in the server's envelope, as /embed's).
"""

from __future__ import annotations

from litestar import Request
from litestar.datastructures import State

from rose_embed.compat.inputs import NormalisedInput
from rose_embed.compat.sparse_wire import tei_pairs
from rose_embed.compat.tei_embed import check_truncation_direction, texts_of
from rose_embed.compat.tei_sparse import SparseValue, TeiSparseRequest
from rose_embed.server.config import ServerConfig
from rose_embed.server.http.openapi import EMBEDDINGS_ERROR_RESPONSES
from rose_embed.server.http.route_spec import RouteSpec
from rose_embed.server.pipeline.serve_request import Answered, RouteSteps, serve_request
from rose_embed.server.pipeline.served_models import SPARSE, ServedModel
from rose_embed.server.pipeline.sparse_ask import SparseAsk, tokens_of
from rose_embed.server.routes.tei_embed import tei_too_long


def _read(data: TeiSparseRequest, model: ServedModel, config: ServerConfig) -> SparseAsk:
    texts = texts_of(data.inputs, config.max_request_inputs)
    check_truncation_direction(data.truncation_direction)
    return SparseAsk(NormalisedInput(texts=texts), param="inputs", format_param=None, prompt_name=data.prompt_name,
                     long_inputs="truncate" if data.truncate else "error", too_long=tei_too_long,
                     return_text=data.return_text)


def _answer(done: Answered) -> list[list[SparseValue]]:
    model, return_text = done.model, done.ask.return_text
    return [tei_pairs(row.indices, row.values, tokens_of(model, row) if return_text else None) for row in done.result]


TEI_SPARSE = RouteSteps(TeiSparseRequest, SPARSE, _read, _answer)


async def tei_embed_sparse(request: Request, state: State) -> list[list[SparseValue]]:
    return await serve_request(request, state, TEI_SPARSE)


ROUTES = [RouteSpec(tei_embed_sparse, "POST", ("/embed_sparse",), "Create sparse embeddings (Hugging Face TEI's "
                    "embed_sparse, SPLADE models)", EMBEDDINGS_ERROR_RESPONSES, body=TeiSparseRequest)]
