"""POST /v1/embeddings (and /embeddings): OpenAI's embeddings, through the request pipeline.

The route reads OpenAI's body into an embeddings ask (server/pipeline/embed_ask.py, which Cohere's and
TEI's embed routes share) and shapes OpenAI's answer; the pipeline (server/pipeline/serve_request.py)
does the rest: over-long inputs are truncated, windowed or refused as `long_inputs` says, and
each part's vectors are encoded as soon as they land.
"""

from __future__ import annotations

from litestar import Request
from litestar.datastructures import State

from rose_embed.compat.inputs import normalise_input
from rose_embed.compat.openai import Embedding, EmbeddingRequest, EmbeddingResponse, Usage
from rose_embed.server.config import ServerConfig
from rose_embed.server.http.openapi import EMBEDDINGS_ERROR_RESPONSES
from rose_embed.server.http.route_spec import RouteSpec
from rose_embed.server.pipeline.embed_ask import EmbedAsk
from rose_embed.server.pipeline.serve_request import Answered, RouteSteps, serve_request
from rose_embed.server.pipeline.served_models import ServedModel


def _read(data: EmbeddingRequest, model: ServedModel, config: ServerConfig) -> EmbedAsk:
    return EmbedAsk(normalise_input(data.input, config.max_request_inputs), formats=(data.encoding_format,),
                    dimensions=data.dimensions, prompt_name=data.prompt_name, input_type=data.input_type,
                    long_inputs=data.long_inputs, priority=data.priority)


def _answer(done: Answered) -> EmbeddingResponse:
    embeddings = done.result[0]
    return EmbeddingResponse(
        data=[Embedding(index=i, embedding=e) for i, e in enumerate(embeddings)],
        # The model that computed the vectors, whichever name was asked (server/pipeline/aliases.py).
        model=done.model.name,
        # Every window counts: the cap, `usage` and the log see what the model reads.
        usage=Usage(prompt_tokens=done.num_tokens, total_tokens=done.num_tokens),
    )


EMBEDDINGS = RouteSteps(EmbeddingRequest, "embedding", _read, _answer)


async def create_embeddings(request: Request, state: State) -> EmbeddingResponse:
    return await serve_request(request, state, EMBEDDINGS)


ROUTES = [RouteSpec(create_embeddings, "POST", ("/v1/embeddings", "/embeddings"), "Create embeddings",
                    EMBEDDINGS_ERROR_RESPONSES, body=EmbeddingRequest)]
