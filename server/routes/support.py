"""What every route needs: the runtime once it can serve, the request's trace, its model, its
admission to the queue, and the request pipeline (server/pipeline/request_pipeline.py) run with the
server's limits."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager

from litestar import Request
from litestar.datastructures import State

from rose_embed.engine.contract.interface import Request as EngineRequest
from rose_embed.server.http.errors import APIError, engine_unavailable, invalid_request, not_ready
from rose_embed.server.pipeline.request_pipeline import Outcome, ReadyPart, run_parts
from rose_embed.server.pipeline.request_weight import request_weight
from rose_embed.server.runtime import Runtime
from rose_embed.server.pipeline.served_models import ServedModel
from rose_embed.server.pipeline.token_inputs import request_tokens_error
from rose_embed.server.http.trace import SCOPE_KEY, RequestTrace


def runtime_of(state: State) -> Runtime:
    """The runtime, once it can serve (else the 503 that says why)."""
    runtime: Runtime = state.runtime
    if not runtime.is_ready:
        raise not_ready()
    problem = runtime.engine_problem()
    if problem is not None:  # fail fast: the engine is dead, restarting or stuck
        raise engine_unavailable(problem, runtime.engines.retry_after())
    return runtime


def trace_of(request: Request) -> RequestTrace:
    """The HTTP middleware's trace of this request (a fresh one where the app runs without it)."""
    trace = request.scope.get(SCOPE_KEY)
    return trace if trace is not None else RequestTrace("-")


def pick_model(request: Request, runtime: Runtime, asked: str | None, kind: str | None = None) -> ServedModel:
    """Runtime.pick, noted on the request's trace: /metrics counts the request under that model's id."""
    if asked == "":  # no name to look up: the 404's advice, --model-alias '', would make it one
        raise invalid_request("you must provide a model parameter: 'model' is empty. Name one of the models "
                              "that /v1/models lists, or leave 'model' out for this server's default, "
                              f"'{runtime.pick(None, kind).name}'.", "model")
    model = runtime.pick(asked, kind)
    trace_of(request).model = model.name
    return model


@contextmanager
def admitted(request: Request, runtime: Runtime, model: ServedModel, cost: int,
             priority: int | None = None) -> Iterator[EngineRequest]:
    """The request admitted to the queue as about `cost` tokens for `model` (else the 429 that says
    when to retry), before anything of it is decoded or tokenized; dropped from the queue when the
    block ends. `priority`: the body's field, where the route's wire has one (server/pipeline/request_weight.py)."""
    weight = request_weight(request, priority, runtime.key_weight(request))
    queued = runtime.engines.open_request(model.index, cost, weight)
    try:
        yield queued
    finally:
        queued.close()


async def compute_parts(request: Request, runtime: Runtime, trace: RequestTrace,
                        parts: Sequence[Callable[[], Awaitable[ReadyPart]]], model: ServedModel,
                        queued: EngineRequest, parts_ahead: int | None = None) -> Outcome:
    """The parts through `model` on the engines, as the admitted `queued`, within the request's token
    cap and what is left of its time. `parts_ahead`: parts made ready at once (default: what the
    runtime says for the model's texts)."""
    config = runtime.config
    time_left = None
    if config.request_timeout is not None:
        time_left = max(0.0, config.request_timeout - (time.perf_counter() - trace.started))
    def tokens_error(num_tokens: int, is_whole: bool) -> APIError:
        return request_tokens_error(num_tokens, config.max_request_tokens, is_whole)

    try:
        return await run_parts(request, queued, trace, parts, runtime.batch_budget, config.max_request_tokens,
                               tokens_error, time_left, parts_ahead=parts_ahead or runtime.parts_ahead(model))
    finally:
        runtime.heap_trimmer.maybe_trim()
