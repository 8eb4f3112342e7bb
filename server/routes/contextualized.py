"""POST /v1/contextualizedembeddings: one vector per chunk, each chunk read in its document's context.

The wire is compat/contextualized.py's (Perplexity's contract, Voyage AI's spelling too); the
computation engine/text/late_chunking.py's: each document runs as one sequence (or, past the
model's limit, as windows cut at chunk boundaries) and every chunk's vector is the mean of
its own tokens' states. Only a model with bidirectional attention and mean pooling can do
that; any other gets a 400 that says why. The route reads the wire into a chunked ask
(server/pipeline/chunked_ask.py), whose windows go through the request pipeline as one part.
"""

from __future__ import annotations

from litestar import Request
from litestar.datastructures import State

from rose_embed.compat.contextualized import (
    ContextualizedEmbeddingRequest,
    ContextualizedEmbeddingResponse,
    DocumentEmbeddings,
    dimensions_of,
    documents_of,
    encoding_format_of,
)
from rose_embed.compat.openai import Embedding, Usage
from rose_embed.engine.text.late_chunking import late_chunking_problem
from rose_embed.server.config import ServerConfig
from rose_embed.server.http.openapi import EMBEDDINGS_ERROR_RESPONSES
from rose_embed.server.http.route_spec import RouteSpec
from rose_embed.server.pipeline.chunked_ask import ChunkedAsk, cannot_late_chunk
from rose_embed.server.pipeline.serve_request import Answered, RouteSteps, serve_request
from rose_embed.server.pipeline.served_models import ServedModel


def default_encoding_format(spec) -> str:
    """The model's own: Perplexity's base64_int8 for a quantising model (pplx-embed), else float."""
    return "base64_int8" if spec.quantization == "tanh" else "float"


def _read(data: ContextualizedEmbeddingRequest, model: ServedModel, config: ServerConfig) -> ChunkedAsk:
    spec = model.view.spec
    problem = late_chunking_problem(spec)
    if problem is not None:
        raise cannot_late_chunk(problem)
    documents, param = documents_of(data)
    encoding_format, format_param = encoding_format_of(data, default_encoding_format(spec))
    dimensions, dimensions_param = dimensions_of(data)
    return ChunkedAsk(documents, param, encoding_format, format_param, dimensions, dimensions_param,
                      data.prompt_name, data.input_type, data.long_inputs)


def _answer(done: Answered) -> ContextualizedEmbeddingResponse:
    num_chunks, embeddings = done.result
    out, first = [], 0
    for i, count in enumerate(num_chunks):
        out.append(DocumentEmbeddings(index=i, data=[Embedding(index=j, embedding=embeddings[first + j])
                                                     for j in range(count)]))
        first += count
    return ContextualizedEmbeddingResponse(
        data=out, model=done.model.name,
        usage=Usage(prompt_tokens=done.num_tokens, total_tokens=done.num_tokens),
    )


CONTEXTUALIZED = RouteSteps(ContextualizedEmbeddingRequest, "embedding", _read, _answer)


async def create_contextualized_embeddings(request: Request, state: State) -> ContextualizedEmbeddingResponse:
    return await serve_request(request, state, CONTEXTUALIZED)


ROUTES = [RouteSpec(create_contextualized_embeddings, "POST",
                    ("/v1/contextualizedembeddings", "/contextualizedembeddings"),
                    "Create contextualized chunk embeddings (late chunking)", EMBEDDINGS_ERROR_RESPONSES,
                    body=ContextualizedEmbeddingRequest)]
