"""Route handlers: /v1/embeddings, /v1/models, /health (and the paths without /v1)."""

from __future__ import annotations

import asyncio
import itertools
import time

import msgspec
import numpy as np
from litestar import Request, get, post
from litestar.datastructures import State

from compat.encoding import encode_embeddings
from compat.inputs import check_token_range, normalise_input
from compat.openai import Embedding, EmbeddingRequest, EmbeddingResponse, Model, ModelList, Usage
from server.errors import APIError, model_not_found, not_ready
from server.options import check_dimensions, check_encoding_format
from server.prompts import apply_prompt, resolve_prompt
from server.runtime import Runtime

_request_ids = itertools.count()
_STARTED = int(time.time())


def _runtime(state: State) -> Runtime:
    runtime: Runtime = state.runtime
    if not runtime.is_ready:
        raise not_ready()
    return runtime


def _check_options(runtime: Runtime, data: EmbeddingRequest) -> None:
    if data.model is not None and data.model != runtime.served_model_name:
        raise model_not_found(data.model)
    check_encoding_format(runtime.engine.spec, data.encoding_format)
    check_dimensions(runtime.engine.spec, data.dimensions)


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


@post(["/v1/embeddings", "/embeddings"], status_code=200, summary="Create embeddings")
async def create_embeddings(request: Request, state: State) -> EmbeddingResponse:
    runtime = _runtime(state)
    # Decoded here, strictly: Litestar's own decoding would turn "8" into 8 for an int field.
    data = msgspec.json.decode(await request.body(), type=EmbeddingRequest)
    _check_options(runtime, data)
    inputs = normalise_input(data.input, runtime.config.max_request_inputs)
    spec = runtime.engine.spec
    prompt = resolve_prompt(spec.prompts, spec.default_prompt_name, data.prompt_name, data.input_type)
    if inputs.texts is not None:
        seqs = await runtime.tokenize(apply_prompt(prompt, inputs.texts))
    else:
        check_token_range(inputs.token_ids, runtime.engine.vocab_size)
        seqs = [runtime.engine.tokenizer.truncate_ids(ids) for ids in inputs.token_ids]
    futures = runtime.batcher.submit(seqs, owner=next(_request_ids))
    vectors = np.stack(await _gather_unless_disconnected(request, futures))
    embeddings = encode_embeddings(vectors, data.encoding_format, data.dimensions, spec.normalize)
    num_tokens = sum(len(s) for s in seqs)
    return EmbeddingResponse(
        data=[Embedding(index=i, embedding=e) for i, e in enumerate(embeddings)],
        model=runtime.served_model_name,
        usage=Usage(prompt_tokens=num_tokens, total_tokens=num_tokens),
    )


@get(["/v1/models", "/models"], summary="List the served model")
async def list_models(state: State) -> ModelList:
    runtime = _runtime(state)
    return ModelList(data=[Model(id=runtime.served_model_name, created=_STARTED)])


@get(["/v1/models/{model_id:path}", "/models/{model_id:path}"], summary="Describe one model")
async def get_model(model_id: str, state: State) -> Model:
    runtime = _runtime(state)
    model_id = model_id.lstrip("/")
    if model_id != runtime.served_model_name:
        raise model_not_found(model_id)
    return Model(id=runtime.served_model_name, created=_STARTED)


@get("/health", summary="Readiness: 200 once the model is loaded and warmed up")
async def health(state: State) -> dict:
    _runtime(state)
    return {"status": "ok"}


ROUTES = [create_embeddings, list_models, get_model, health]
