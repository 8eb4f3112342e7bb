"""POST /v1/embeddings (and /embeddings): OpenAI's embeddings, through the request pipeline.

The route reads OpenAI's body into an embeddings ask (server/pipeline/embed_ask.py, which Cohere's and
TEI's embed routes share) and shapes OpenAI's answer; for a CLIP model an item may be an image
(`{"type": "image_url", "image_url": {"url": "data:..."}}`: server/pipeline/image_parts.py,
docs/images.md), or, in Infinity's body (`modality: "image"`), each string of `input` is an image's URL
as on /embeddings_image. The pipeline (server/pipeline/serve_request.py) does the rest: over-long
inputs are truncated, windowed or refused as `long_inputs` says, and each part's vectors are encoded as
soon as they land. A sparse encoder (SPLADE) answers here too,
each text's pairs in this server's extension of the answer (server/pipeline/sparse_ask.py,
docs/sparse.md), a multi-vector (ColBERT) model, each text's token vectors
(server/pipeline/colbert_ask.py, docs/colbert.md), and a BGE-M3 model, each text's dense vector or,
where the request names `outputs`, any of its dense, sparse and multi-vector outputs
(server/pipeline/m3_ask.py, docs/bge-m3.md).
"""

from __future__ import annotations

from functools import partial

from litestar import Request
from litestar.datastructures import State

from rose_embed.compat.infinity_image import images_of
from rose_embed.compat.inputs import normalise_input
from rose_embed.compat.multi_output_wire import multi_output_item
from rose_embed.compat.openai import (MODALITIES, Embedding, EmbeddingRequest, EmbeddingResponse, MultiOutputEmbedding,
                                      Usage)
from rose_embed.compat.sparse_wire import sparse_embedding
from rose_embed.server.config import ServerConfig
from rose_embed.server.http.errors import invalid_request
from rose_embed.server.http.openapi import EMBEDDINGS_ERROR_RESPONSES
from rose_embed.server.http.openapi_schema import struct_schema
from rose_embed.server.http.route_spec import RouteSpec
from rose_embed.server.pipeline.colbert_ask import ColbertAsk
from rose_embed.server.pipeline.embed_ask import EmbedAsk
from rose_embed.server.pipeline.image_parts import check_images
from rose_embed.server.pipeline.m3_ask import M3Ask
from rose_embed.server.pipeline.serve_request import Answered, RouteSteps, serve_request
from rose_embed.server.pipeline.served_models import MULTI_OUTPUT, MULTI_VECTOR, SPARSE, ServedModel
from rose_embed.server.pipeline.sparse_ask import SparseAsk, tokens_of


def _read(data: EmbeddingRequest, model: ServedModel, config: ServerConfig) -> EmbedAsk:
    if data.modality == "image":  # Infinity's: every string an image
        inputs = images_of(data.input, config.max_request_inputs)
    elif data.modality in (None, "text"):
        inputs = normalise_input(data.input, config.max_request_inputs, allow_images=True)
    else:
        raise invalid_request(f"'modality' must be one of {', '.join(MODALITIES)} (audio is embedded by no model "
                              f"here); got {data.modality!r}", "modality")
    if inputs.items is not None:  # before the kinds below: none of theirs takes images
        check_images(model, inputs)
    # Infinity's client sends dimensions 0 for the whole vector.
    dimensions = None if data.modality is not None and data.dimensions == 0 else data.dimensions
    fields = {"formats": (data.encoding_format,), "dimensions": dimensions, "prompt_name": data.prompt_name,
              "input_type": data.input_type, "long_inputs": data.long_inputs, "priority": data.priority}
    if data.outputs is not None and model.kind != MULTI_OUTPUT:
        raise invalid_request(f"'outputs' applies to BGE-M3 models, which give several outputs per text; the model "
                              f"'{model.name}' gives one", "outputs")
    if model.kind == SPARSE:
        if data.encoding_format == "base64":
            # The OpenAI SDK asks for base64 unless told otherwise and decodes only a string; a sparse
            # answer is an object of JSON numbers either way, which the SDK hands on as it is.
            fields["formats"] = ("float",)
        return SparseAsk(inputs, return_text=data.return_text, **fields)
    if data.return_text:
        raise invalid_request("'return_text' applies to sparse models, whose dimensions are tokens; this model "
                              "gives dense vectors", "return_text")
    if model.kind == MULTI_VECTOR:
        return ColbertAsk(inputs, **fields)
    if model.kind == MULTI_OUTPUT:
        return M3Ask(inputs, outputs=data.outputs, **fields)
    return EmbedAsk(inputs, **fields)


def _data(done: Answered) -> list[Embedding]:
    """Each input's dense vector, a sparse model's pairs, a ColBERT model's token vectors or a BGE-M3 model's
    outputs in this server's extensions (docs/sparse.md, docs/colbert.md, docs/bge-m3.md)."""
    if isinstance(done.ask, M3Ask) and done.ask.outputs is not None:
        return [multi_output_item(i, answer) for i, answer in enumerate(done.result)]
    if isinstance(done.ask, ColbertAsk):
        return [Embedding(index=i, embedding=e, object="multi_vector_embedding") for i, e in enumerate(done.result[0])]
    if not isinstance(done.ask, SparseAsk):
        return [Embedding(index=i, embedding=e) for i, e in enumerate(done.result[0])]
    tokens = partial(tokens_of, done.model) if done.ask.return_text else lambda row: None
    return [Embedding(index=i, embedding=sparse_embedding(row.indices, row.values, tokens(row)),
                      object="sparse_embedding") for i, row in enumerate(done.result)]


def _answer(done: Answered) -> EmbeddingResponse:
    return EmbeddingResponse(
        data=_data(done),
        # The model that computed the vectors, whichever name was asked (server/pipeline/aliases.py).
        model=done.model.name,
        # Every window counts: the cap, `usage` and the log see what the model reads.
        usage=Usage(prompt_tokens=done.num_tokens, total_tokens=done.num_tokens),
    )


EMBEDDINGS = RouteSteps(EmbeddingRequest, ("embedding", SPARSE, MULTI_VECTOR, MULTI_OUTPUT), _read, _answer)


async def create_embeddings(request: Request, state: State) -> EmbeddingResponse:
    return await serve_request(request, state, EMBEDDINGS)


# Each item OpenAI's, or with a BGE-M3 model asked for `outputs` the outputs it asked for.
ANSWER = struct_schema(EmbeddingResponse, items={"data": (Embedding, MultiOutputEmbedding)})
ROUTES = [RouteSpec(create_embeddings, "POST", ("/v1/embeddings", "/embeddings"), "Create embeddings",
                    EMBEDDINGS_ERROR_RESPONSES, body=EmbeddingRequest, answer=ANSWER)]
