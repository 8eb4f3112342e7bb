"""POST /embeddings_image: Infinity's image embeddings, through the request pipeline.

The wire is compat/infinity_image.py's; the ask is /v1/embeddings' (server/pipeline/embed_ask.py), its
inputs images only, decoded, fetched and preprocessed as /v1/embeddings' image items are
(server/pipeline/image_parts.py, docs/images.md). A model without a vision tower refuses them by name.
"""

from __future__ import annotations

import time
import uuid

from litestar import Request
from litestar.datastructures import State

from rose_embed.compat.infinity_image import InfinityEmbeddingResponse, InfinityImageRequest, images_of
from rose_embed.compat.openai import Embedding, Usage
from rose_embed.server.config import ServerConfig
from rose_embed.server.http.openapi import EMBEDDINGS_ERROR_RESPONSES
from rose_embed.server.http.route_spec import RouteSpec
from rose_embed.server.pipeline.embed_ask import EmbedAsk
from rose_embed.server.pipeline.serve_request import Answered, RouteSteps, serve_request
from rose_embed.server.pipeline.served_models import ServedModel


def _read(data: InfinityImageRequest, model: ServedModel, config: ServerConfig) -> EmbedAsk:
    return EmbedAsk(images_of(data.input, config.max_request_inputs), formats=(data.encoding_format,),
                    dimensions=data.dimensions or None)


def _answer(done: Answered) -> InfinityEmbeddingResponse:
    return InfinityEmbeddingResponse(
        data=[Embedding(index=i, embedding=e) for i, e in enumerate(done.result[0])], model=done.model.name,
        usage=Usage(prompt_tokens=done.num_tokens, total_tokens=done.num_tokens),
        id=f"infinity-{uuid.uuid4()}", created=int(time.time()))


INFINITY_IMAGE = RouteSteps(InfinityImageRequest, "embedding", _read, _answer)


async def infinity_image(request: Request, state: State) -> InfinityEmbeddingResponse:
    return await serve_request(request, state, INFINITY_IMAGE)


ROUTES = [RouteSpec(infinity_image, "POST", ("/embeddings_image",), "Create image embeddings (Infinity's)",
                    EMBEDDINGS_ERROR_RESPONSES, body=InfinityImageRequest)]
