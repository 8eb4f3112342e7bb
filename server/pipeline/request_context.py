"""What every request starts from: the runtime once it can serve, the request's trace and its model."""

from __future__ import annotations

from litestar import Request
from litestar.datastructures import State

from rose_embed.compat.openai import UNNAMED_MODEL
from rose_embed.server.http.errors import engine_unavailable, invalid_request, not_ready
from rose_embed.server.http.trace import SCOPE_KEY, RequestTrace
from rose_embed.server.pipeline.served_models import ServedModel
from rose_embed.server.pipeline.serving import Serving


def serving_of(state: State) -> Serving:
    """The runtime, once it can serve (else the 503 that says why)."""
    serving: Serving = state.runtime
    if not serving.is_ready:
        raise not_ready()
    problem = serving.engine_problem()
    if problem is not None:  # fail fast: the engine is dead, restarting or stuck
        raise engine_unavailable(problem, serving.engines.retry_after())
    return serving


def trace_of(request: Request) -> RequestTrace:
    """The HTTP middleware's trace of this request (a fresh one where the app runs without it)."""
    trace = request.scope.get(SCOPE_KEY)
    return trace if trace is not None else RequestTrace("-")


def pick_model(request: Request, serving: Serving, asked: str | None,
               kind: str | tuple[str, ...] | None = None) -> ServedModel:
    """Serving.pick, noted on the request's trace: /metrics counts the request under that model's id."""
    if asked == "":  # no name to look up: the 404's advice, --model-alias '', would make it one
        raise invalid_request("you must provide a model parameter: 'model' is empty. Name one of the models "
                              "that /v1/models lists, or leave 'model' out for this server's default, "
                              f"'{serving.pick(None, kind).name}'.", "model")
    # Infinity's clients name no model with this placeholder, on any route.
    model = serving.pick(None if asked == UNNAMED_MODEL else asked, kind)
    trace_of(request).model = model.name
    return model
