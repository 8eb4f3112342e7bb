"""An admitted request's parts through the engines, within the server's limits.

The request is admitted to the queue before any part of it is made ready: nothing is decoded or
tokenized for a request that is refused (429). It leaves the queue however its parts end.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence

from litestar import Request

from rose_embed.server.http.errors import APIError
from rose_embed.server.http.trace import RequestTrace
from rose_embed.server.pipeline.request_pipeline import Outcome, ReadyPart, run_parts
from rose_embed.server.pipeline.request_weight import request_weight
from rose_embed.server.pipeline.served_models import ServedModel
from rose_embed.server.pipeline.serving import Serving
from rose_embed.server.pipeline.token_inputs import request_tokens_error

PartMaker = Callable[[], Awaitable[ReadyPart]]


async def compute_admitted(request: Request, serving: Serving, trace: RequestTrace, model: ServedModel, cost: int,
                           make_parts: Callable[[], Awaitable[Sequence[PartMaker]]], priority: int | None = None,
                           parts_ahead: int | None = None) -> Outcome:
    """The request admitted to the queue as about `cost` tokens for `model` (else the 429 that says
    when to retry); then `make_parts()`'s parts through `model` on the engines, within the request's
    token cap and what is left of its time. `priority`: the body's field, where the route's wire has
    one (server/pipeline/request_weight.py); `parts_ahead`: parts made ready at once (default: what
    the runtime says for the model's texts)."""
    config = serving.config
    weight = request_weight(request, priority, serving.key_weight(request))
    queued = serving.engines.open_request(model.index, cost, weight)
    try:
        parts = await make_parts()
        time_left = None
        if config.request_timeout is not None:
            time_left = max(0.0, config.request_timeout - (time.perf_counter() - trace.started))

        def tokens_error(num_tokens: int, is_whole: bool) -> APIError:
            return request_tokens_error(num_tokens, config.max_request_tokens, is_whole)

        return await run_parts(request, queued, trace, parts, serving.batch_budget, config.max_request_tokens,
                               tokens_error, time_left, parts_ahead=parts_ahead or serving.parts_ahead(model))
    finally:
        queued.close()
        serving.heap_trimmer.maybe_trim()
