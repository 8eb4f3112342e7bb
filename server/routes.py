"""Route handlers: /v1/embeddings, /v1/models, /health (and the paths without /v1)."""

from __future__ import annotations

import asyncio
import time

import numpy as np
from litestar import Request, get, post
from litestar.datastructures import State

from compat.encoding import encode_embeddings
from compat.inputs import normalise_input
from compat.openai import Embedding, EmbeddingRequest, EmbeddingResponse, Model, ModelList, Usage
from server.aliases import ModelNames, model_names
from server.errors import APIError, engine_unavailable, not_ready
from server.guards import check_finite, check_input_chars, decode_request, request_timeout
from server.long_inputs import fit_request_texts, fit_request_token_ids, long_inputs_mode
from server.openapi import EMBEDDINGS_ERROR_RESPONSES, ERROR_RESPONSES, EmbeddingsOperation
from server.options import check_dimensions, check_encoding_format
from server.prompts import apply_prompt, resolve_prompt
from server.runtime import Runtime
from server.token_inputs import TokenInputs
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


def _model_names(runtime: Runtime) -> ModelNames:
    return model_names(runtime.served_model_name, runtime.config.model_aliases, runtime.config.strict_model_names)


def _check_options(runtime: Runtime, data: EmbeddingRequest) -> str:
    """The served model's name (a request may ask for it by another); raises on an option it cannot serve."""
    served = _model_names(runtime).resolve(data.model)
    check_encoding_format(runtime.engine.spec, data.encoding_format)
    check_dimensions(runtime.engine.spec, data.dimensions)
    return served


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
            results.cancel()  # cancels the inputs too
            # The gather then ends with a CancelledError that nobody awaits; unread, asyncio
            # would log it as "exception was never retrieved" for every client that left.
            results.add_done_callback(_read_exception)
        for future in futures:  # gather leaves the others running when one input failed
            future.cancel()
    if not results.done():
        if not watcher.done():
            raise request_timeout()
        raise APIError(499, "The client closed the request.", "invalid_request_error", None, "client_closed")
    return results.result()


def _read_exception(future: asyncio.Future) -> None:
    if not future.cancelled():
        future.exception()


def _trace(request: Request) -> RequestTrace:
    """The HTTP middleware's trace of this request (a fresh one where the app runs without it)."""
    trace = request.scope.get(SCOPE_KEY)
    return trace if trace is not None else RequestTrace("-")


def _time_left(runtime: Runtime, trace: RequestTrace) -> float | None:
    if runtime.config.request_timeout is None:
        return None
    return max(0.0, runtime.config.request_timeout - (time.perf_counter() - trace.started))


@post(["/v1/embeddings", "/embeddings"], status_code=200, summary="Create embeddings",
      operation_class=EmbeddingsOperation, responses=EMBEDDINGS_ERROR_RESPONSES)
async def create_embeddings(request: Request, state: State) -> EmbeddingResponse:
    runtime = _runtime(state)
    # Decoded here, strictly: Litestar's own decoding would turn "8" into 8 for an int field.
    data = decode_request(await request.body())
    served = _check_options(runtime, data)
    token_inputs: TokenInputs = state.token_inputs
    inputs = await token_inputs.decode_token_ids(normalise_input(data.input, runtime.config.max_request_inputs))
    spec = runtime.engine.spec
    prompt = resolve_prompt(spec.prompts, spec.default_prompt_name, data.prompt_name, data.input_type)
    mode = long_inputs_mode(runtime.config.long_inputs, data.long_inputs)
    tokenizer = runtime.engine.tokenizer
    trace = _trace(request)
    if inputs.texts is not None:
        check_input_chars(inputs.texts, runtime.config.max_input_chars, is_chunked=mode == "chunk")
        texts = apply_prompt(prompt, inputs.texts)
        trace.texts = inputs.texts if runtime.config.log_inputs else None
        started = time.perf_counter()
        seqs = await runtime.tokenize(texts)
        trace.tokenization_seconds = time.perf_counter() - started
        fitted = await fit_request_texts(tokenizer, mode, inputs.texts, prompt, seqs)
    else:
        token_inputs.check_token_ids(inputs.token_ids, runtime.engine.vocab_size)
        fitted = fit_request_token_ids(tokenizer, mode, inputs.token_ids)
    # Every window counts: the cap, `usage` and the log see what the model reads.
    num_tokens = token_inputs.check_request_tokens(fitted.seqs)
    trace.num_inputs, trace.num_tokens = len(inputs), num_tokens
    futures = runtime.batcher.submit(fitted.seqs, owner=trace)
    trace.submitted = time.perf_counter()
    vectors = np.stack(await _gather_unless_disconnected(request, futures, _time_left(runtime, trace)))
    vectors = fitted.combine(vectors, spec.normalize)
    check_finite(vectors, trace.request_id)
    embeddings = encode_embeddings(vectors, data.encoding_format, data.dimensions, spec.normalize)
    return EmbeddingResponse(
        data=[Embedding(index=i, embedding=e) for i, e in enumerate(embeddings)],
        model=served,  # the model that computed the vectors, whichever name was asked (server/aliases.py)
        usage=Usage(prompt_tokens=num_tokens, total_tokens=num_tokens),
    )


@get(["/v1/models", "/models"], summary="List the served model and its aliases", responses=ERROR_RESPONSES)
async def list_models(state: State) -> ModelList:
    runtime = _runtime(state)
    return ModelList(data=[Model(id=name, created=_STARTED) for name in _model_names(runtime).listed()])


@get(["/v1/models/{model_id:path}", "/models/{model_id:path}"], summary="Describe one model",
     responses=ERROR_RESPONSES)
async def get_model(model_id: str, state: State) -> Model:
    runtime = _runtime(state)
    model_id = model_id.lstrip("/")
    _model_names(runtime).resolve(model_id)  # a name a request may use is described, listed or not
    return Model(id=model_id, created=_STARTED)


@get("/health", summary="Readiness: 200 once the model is loaded and warmed up, while an engine serves",
     responses={503: ERROR_RESPONSES[503]})
async def health(state: State) -> dict:
    if state.metrics.board is not None:  # --frontend-workers: every front end's report, whichever answers
        return state.metrics.server_health()
    runtime = _runtime(state)
    engines = runtime.engine_states()
    if engines is None:
        return {"status": "ok"}
    # Data parallel: 200 while one engine serves; the list says which are out, and why.
    degraded = any(engine["state"] != "serving" for engine in engines)
    return {"status": "degraded" if degraded else "ok", "engines": engines}


ROUTES = [create_embeddings, list_models, get_model, health]
