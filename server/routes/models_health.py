"""Route handlers: /v1/models and /health (and the paths without /v1)."""

from __future__ import annotations

import time

from litestar.datastructures import State

from rose_embed.compat.openai import Model, ModelList
from rose_embed.server.http.openapi import ERROR_RESPONSES
from rose_embed.server.http.route_spec import RouteSpec
from rose_embed.server.pipeline.request_context import serving_of

_STARTED = int(time.time())


async def list_models(state: State) -> ModelList:
    runtime = serving_of(state)
    names = runtime.names
    return ModelList(data=[Model(id=name, created=_STARTED, kind=runtime.pick(name).kind) for name in names.listed()])


async def get_model(model_id: str, state: State) -> Model:
    runtime = serving_of(state)
    model_id = model_id.lstrip("/")
    model = runtime.pick(model_id)  # a name a request may use is described, listed or not
    return Model(id=model_id, created=_STARTED, kind=model.kind)


async def health(state: State) -> dict:
    if state.metrics.board is not None:  # --frontend-workers: every front end's report, whichever answers
        return state.metrics.server_health()
    runtime = serving_of(state)
    engines = runtime.engine_states()
    # Data parallel: 200 while one engine serves; the list says which are out, and why.
    degraded = any(engine["state"] != "serving" for engine in engines)
    return {"status": "degraded" if degraded else "ok", "engines": engines}


ROUTES = [
    RouteSpec(list_models, "GET", ("/v1/models", "/models"),
              "List the served models, their aliases and each one's kind", ERROR_RESPONSES),
    RouteSpec(get_model, "GET", ("/v1/models/{model_id:path}", "/models/{model_id:path}"), "Describe one model",
              ERROR_RESPONSES,
              labels={"/v1/models/{model_id:path}": "/v1/models/{model}",
                      "/models/{model_id:path}": "/models/{model}"}),
    RouteSpec(health, "GET", ("/health",),
              "Readiness: 200 once the model is loaded and warmed up, while an engine serves",
              {503: ERROR_RESPONSES[503]}, access="open", is_polled=True),
]
