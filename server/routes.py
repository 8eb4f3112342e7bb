"""Route handlers: /v1/embeddings, /v1/models, /health (and the paths without /v1)."""

from __future__ import annotations

import asyncio
import itertools
import time

import msgspec
import numpy as np
from litestar import Request, get, post
from litestar.datastructures import State

from compat.encoding import ENCODING_FORMATS, truncate_dimensions
from compat.inputs import normalise_input
from compat.openai import Embedding, EmbeddingRequest, EmbeddingResponse, Model, ModelList, Usage
from compat.vector_wire import encode_vectors
from server.aliases import model_names
from server.errors import APIError, invalid_request, model_not_found, not_ready
from server.openapi import EMBEDDINGS_ERROR_RESPONSES, ERROR_RESPONSES, EmbeddingsOperation
from server.runtime import Runtime
from server.token_inputs import TokenInputs

_request_ids = itertools.count()
_STARTED = int(time.time())


def _runtime(state: State) -> Runtime:
    runtime: Runtime = state.runtime
    if not runtime.is_ready:
        raise not_ready()
    return runtime


def _model_names(runtime: Runtime) -> list[str]:
    return model_names(runtime.served_model_name, runtime.config.model_aliases)


def _check_options(runtime: Runtime, data: EmbeddingRequest) -> None:
    if data.model is not None and data.model not in _model_names(runtime):
        raise model_not_found(data.model)
    if data.encoding_format not in ENCODING_FORMATS:
        raise invalid_request(
            f"'encoding_format' must be one of {', '.join(ENCODING_FORMATS)}; got {data.encoding_format!r}",
            "encoding_format",
        )
    full = runtime.engine.dimensions
    if data.dimensions is not None and not 1 <= data.dimensions <= full:
        raise invalid_request(
            f"'dimensions' must be between 1 and {full} for this model; got {data.dimensions}", "dimensions"
        )


async def _wait_for_disconnect(request: Request) -> None:
    """Returns when the client goes away (the body is already read, so only that is left)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _gather_unless_disconnected(request: Request, futures: list[asyncio.Future]) -> list[np.ndarray]:
    results = asyncio.gather(*futures)
    watcher = asyncio.ensure_future(_wait_for_disconnect(request))
    try:
        await asyncio.wait({results, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if not results.done():
        # The client is gone: cancelling frees its queued inputs before they are computed.
        results.cancel()
        raise APIError(499, "The client closed the request.", "invalid_request_error", None, "client_closed")
    return results.result()


@post(["/v1/embeddings", "/embeddings"], status_code=200, summary="Create embeddings",
      operation_class=EmbeddingsOperation, responses=EMBEDDINGS_ERROR_RESPONSES)
async def create_embeddings(request: Request, state: State) -> EmbeddingResponse:
    runtime = _runtime(state)
    # Decoded here, strictly: Litestar's own decoding would turn "8" into 8 for an int field.
    data = msgspec.json.decode(await request.body(), type=EmbeddingRequest)
    _check_options(runtime, data)
    token_inputs: TokenInputs = state.token_inputs
    inputs = await token_inputs.decode_tiktoken(normalise_input(data.input, runtime.config.max_request_inputs))
    if inputs.texts is not None:
        seqs = await runtime.tokenize(inputs.texts)
        await token_inputs.check_context_length(runtime.engine, inputs.texts, seqs)
    else:
        token_inputs.check_token_ids(inputs.token_ids, runtime.engine.vocab_size, runtime.engine.tokenizer.max_seq_len)
        seqs = [runtime.engine.tokenizer.truncate_ids(ids) for ids in inputs.token_ids]
    num_tokens = token_inputs.check_request_tokens(seqs)
    futures = runtime.batcher.submit(seqs, owner=next(_request_ids))
    vectors = truncate_dimensions(np.stack(await _gather_unless_disconnected(request, futures)), data.dimensions)
    return EmbeddingResponse(
        data=[Embedding(index=i, embedding=e) for i, e in enumerate(encode_vectors(vectors, data.encoding_format))],
        model=data.model or runtime.served_model_name,  # OpenAI echoes the name asked for (an alias too)
        usage=Usage(prompt_tokens=num_tokens, total_tokens=num_tokens),
    )


@get(["/v1/models", "/models"], summary="List the served model and its aliases", responses=ERROR_RESPONSES)
async def list_models(state: State) -> ModelList:
    runtime = _runtime(state)
    return ModelList(data=[Model(id=name, created=_STARTED) for name in _model_names(runtime)])


@get(["/v1/models/{model_id:path}", "/models/{model_id:path}"], summary="Describe one model",
     responses=ERROR_RESPONSES)
async def get_model(model_id: str, state: State) -> Model:
    runtime = _runtime(state)
    model_id = model_id.lstrip("/")
    if model_id not in _model_names(runtime):
        raise model_not_found(model_id)
    return Model(id=model_id, created=_STARTED)


@get("/health", summary="Readiness: 200 once the model is loaded and warmed up",
     responses={503: ERROR_RESPONSES[503]})
async def health(state: State) -> dict:
    _runtime(state)
    return {"status": "ok"}


ROUTES = [create_embeddings, list_models, get_model, health]
