"""The pipeline's one entry: a route hands it how to read its request and how to shape its answer.

Every route that computes (OpenAI's, Cohere's and TEI's embed, contextualized embeddings, rerank)
is the same walk: the runtime once it can serve, the body decoded strictly, the model the
request names (of the kind the route serves), the route's reading of its wire into an ask (the
pipeline's inputs: server/pipeline/embed_ask.py, pair_ask.py, chunked_ask.py), the ask's checks
against the model, admission, its parts through the engines, and the route's answer from what
came back. The route says only what differs: its wire.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from litestar import Request
from litestar.datastructures import State

from rose_embed.server.config import ServerConfig
from rose_embed.server.http.json_body import read_json
from rose_embed.server.http.trace import RequestTrace
from rose_embed.server.pipeline.compute_request import PartMaker, compute_admitted
from rose_embed.server.pipeline.model_kind import require_kind
from rose_embed.server.pipeline.request_context import pick_model, serving_of, trace_of
from rose_embed.server.pipeline.request_pipeline import Outcome
from rose_embed.server.pipeline.served_models import ServedModel
from rose_embed.server.pipeline.serving import Serving
from rose_embed.server.pipeline.token_inputs import TokenInputs


class Ask(Protocol):
    """A request as the pipeline computes it, whatever wire it came in on."""

    priority: int | None  # the body's `priority`, where the wire has one (server/pipeline/request_weight.py)

    def check(self, serving: Serving, model: ServedModel, trace: RequestTrace) -> int:
        """Refuse what the model cannot do, before anything is tokenized; the request's cost to the queue."""

    async def parts(self, serving: Serving, model: ServedModel, trace: RequestTrace,
                    token_inputs: TokenInputs) -> list[PartMaker]:
        """Its parts, once admitted."""

    def parts_ahead(self, serving: Serving, model: ServedModel) -> int | None:
        """Parts made ready at once (None: what the runtime says for the model's texts)."""

    def result(self, outcome: Outcome, trace: RequestTrace) -> Any:
        """What the route shapes its answer from, out of every part's answers."""


@dataclass(frozen=True)
class Answered:
    """What a route's answer is shaped from."""

    request: Request
    data: Any  # the decoded body
    ask: Ask
    model: ServedModel  # the model that computed it, whichever name was asked
    result: Any  # the ask's result
    num_tokens: int  # every token the model read, windows and special tokens included


@dataclass(frozen=True)
class RouteSteps:
    """What a route hands the pipeline: its body's type, the kind of model it serves ("embedding",
    "rerank", "classify" or "sparse_embedding", or several of them), how to read its body into an ask
    (refusing what its wire does not allow) and how to shape the answer."""

    body: type
    kind: str | tuple[str, ...]
    read: Callable[[Any, ServedModel, ServerConfig], Ask]
    answer: Callable[[Answered], Any]


async def serve_request(request: Request, state: State, steps: RouteSteps):
    serving = serving_of(state)
    data = await read_json(request, steps.body)
    model = pick_model(request, serving, data.model, steps.kind)
    require_kind(model, steps.kind)
    ask = steps.read(data, model, serving.config)
    trace = trace_of(request)
    cost = ask.check(serving, model, trace)
    outcome = await compute_admitted(request, serving, trace, model, cost,
                                     partial(ask.parts, serving, model, trace, state.token_inputs),
                                     ask.priority, ask.parts_ahead(serving, model))
    result = ask.result(outcome, trace)
    return steps.answer(Answered(request, data, ask, model, result, outcome.num_tokens))
