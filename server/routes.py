"""Route handlers: /v1/embeddings, /v1/models, /health (and the paths without /v1)."""

from __future__ import annotations

import asyncio
import time

import numpy as np
from litestar import Request, get, post
from litestar.datastructures import State

from compat.encoding import ENCODING_FORMATS, encode_vector, truncate_dimensions
from compat.inputs import check_token_range, normalise_input
from compat.openai import Embedding, EmbeddingRequest, EmbeddingResponse, Model, ModelList, Usage
from server.errors import APIError, engine_unavailable, invalid_request, model_not_found, not_ready
from server.guards import check_finite, check_input_chars, decode_request, request_timeout
from server.runtime import Runtime
from server.trace import SCOPE_KEY, RequestTrace

_STARTED = int(time.time())


def _runtime(state: State) -> Runtime:
    runtime: Runtime = state.runtime
    if not runtime.is_ready:
        raise not_ready()
    problem = runtime.engine_problem()
    if problem is not None:  # fail fast: the engine is dead or stuck
        raise engine_unavailable(problem)
    return runtime


def _check_options(runtime: Runtime, data: EmbeddingRequest) -> None:
    if data.model is not None and data.model != runtime.served_model_name:
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


async def _gather_unless_disconnected(request: Request, futures: list[asyncio.Future],
                                      timeout: float | None = None) -> list[np.ndarray]:
    results = asyncio.gather(*futures)
    watcher = asyncio.ensure_future(_wait_for_disconnect(request))
    try:
        await asyncio.wait({results, watcher}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        # Whatever ended the wait (a gone client, the timeout, one failed input), the request's
        # other inputs are of no use now: cancelling frees them before they are computed.
        if not results.done():
            results.cancel()  # cancels the inputs too (and marks the gather's error as seen)
        for future in futures:  # gather leaves the others running when one input failed
            future.cancel()
    if not results.done():
        if not watcher.done():
            raise request_timeout()
        raise APIError(499, "The client closed the request.", "invalid_request_error", None, "client_closed")
    return results.result()


def _trace(request: Request) -> RequestTrace:
    """The HTTP middleware's trace of this request (a fresh one where the app runs without it)."""
    trace = request.scope.get(SCOPE_KEY)
    return trace if trace is not None else RequestTrace("-")


def _time_left(runtime: Runtime, trace: RequestTrace) -> float | None:
    if runtime.config.request_timeout is None:
        return None
    return max(0.0, runtime.config.request_timeout - (time.perf_counter() - trace.started))


@post(["/v1/embeddings", "/embeddings"], status_code=200, summary="Create embeddings")
async def create_embeddings(request: Request, state: State) -> EmbeddingResponse:
    runtime = _runtime(state)
    # Decoded here, strictly: Litestar's own decoding would turn "8" into 8 for an int field.
    data = decode_request(await request.body())
    _check_options(runtime, data)
    inputs = normalise_input(data.input, runtime.config.max_request_inputs)
    trace = _trace(request)
    if inputs.texts is not None:
        check_input_chars(inputs.texts, runtime.config.max_input_chars)
        trace.texts = inputs.texts if runtime.config.log_inputs else None
        started = time.perf_counter()
        seqs = await runtime.tokenize(inputs.texts)
        trace.tokenization_seconds = time.perf_counter() - started
    else:
        check_token_range(inputs.token_ids, runtime.engine.vocab_size)
        seqs = [runtime.engine.tokenizer.truncate_ids(ids) for ids in inputs.token_ids]
    num_tokens = sum(len(s) for s in seqs)
    trace.num_inputs, trace.num_tokens = len(seqs), num_tokens
    futures = runtime.batcher.submit(seqs, owner=trace)
    trace.submitted = time.perf_counter()
    vectors = np.stack(await _gather_unless_disconnected(request, futures, _time_left(runtime, trace)))
    check_finite(vectors, trace.request_id)
    vectors = truncate_dimensions(vectors, data.dimensions)
    return EmbeddingResponse(
        data=[Embedding(index=i, embedding=encode_vector(v, data.encoding_format)) for i, v in enumerate(vectors)],
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
