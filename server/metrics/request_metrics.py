"""The per-request series of /metrics, kept apart per served model.

Every request is counted under the `model` label: the served id of the model a route picked for it
(Serving.pick, through server/pipeline/request_context.py's pick_model), or "" for a request
answered before any model was picked (an unknown model's 404, a body that does not parse, a 503
while loading) or on a route that computes with none (/health, /metrics, /v1/models). An empty
label value is what Prometheus stores as no label at all, and it cannot be taken for a served id,
which is never empty. A server with an embedder and a reranker side by side shows each one's
traffic; a sum over `model` is the server's.

This runs once per request on a front end that answers tens of thousands a second, and
prometheus_client's labels() takes a lock and builds its key on every call: so each model's
children (by route and status, by phase, by size) are looked up once and kept.

By size, requests fall in three classes: one input, a few (at most SMALL_REQUEST_INPUTS) and
more. Each class's queue wait and tokens computed show an operator the queue's fairness at
work: one-text queries wait about a batch however much bulk work the other class holds.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

_SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
SMALL_REQUEST_INPUTS = 32


def size_class(num_inputs: int) -> str:
    return "one" if num_inputs <= 1 else "small" if num_inputs <= SMALL_REQUEST_INPUTS else "large"


class RequestSeries:
    """rose_requests, rose_request_phase_seconds, rose_request_inputs and rose_request_tokens."""

    def __init__(self, registry: CollectorRegistry):
        self.requests = Counter("rose_requests", "HTTP requests by route, status and model",
                                ["route", "status", "model"], registry=registry)
        self.latency = Histogram("rose_request_phase_seconds", "Time per request in each phase (preparation, queue, "
                                 "tokenization, inference, answer, total), by model", ["phase", "model"],
                                 buckets=_SECONDS, registry=registry)
        self.inputs = Counter("rose_request_inputs", "Inputs (texts, chunks, query-document pairs) of the requests "
                              "answered with vectors or scores, by model", ["model"], registry=registry)
        self.tokens = Counter("rose_request_tokens", "Tokens of the requests answered with vectors or scores, as "
                              "their usage says (every window counts), by model", ["model"], registry=registry)
        self.class_wait = Histogram("rose_request_queue_wait_seconds", "Time from a request's first piece handed to "
                                    "the engines to the first batch that holds any of it, by size (one input, "
                                    f"at most {SMALL_REQUEST_INPUTS}, more) and model", ["size", "model"],
                                    buckets=_SECONDS, registry=registry)
        self.class_tokens = Counter("rose_request_size_tokens", "Tokens of the requests answered with vectors or "
                                    f"scores, by size (one input, at most {SMALL_REQUEST_INPUTS}, more) and model",
                                    ["size", "model"], registry=registry)
        self._models: dict[str, _ModelSeries] = {}

    def observe(self, route: str, status: int, phases: dict[str, float], model: str,
                num_inputs: int | None, num_tokens: int | None) -> None:
        series = self._models.get(model)
        if series is None:  # the set of models is fixed when the server starts: this happens once per model
            series = self._models[model] = _ModelSeries(self, model)
        series.observe(route, status, phases, num_inputs, num_tokens)


class _ModelSeries:
    """One model's children of every per-request family, made as each is first needed."""

    def __init__(self, families: RequestSeries, model: str):
        self.families, self.model = families, model
        self.requests: dict[tuple[str, int], Counter] = {}  # by (route, status): both come from fixed sets
        self.phases: dict[str, Histogram] = {}
        self.usage: tuple[Counter, Counter] | None = None  # inputs and tokens: never made for the "" model
        self.sizes: dict[str, tuple[Histogram, Counter]] = {}  # queue wait and tokens by size class

    def observe(self, route: str, status: int, phases: dict[str, float],
                num_inputs: int | None, num_tokens: int | None) -> None:
        key = (route, status)
        requests = self.requests.get(key)
        if requests is None:
            requests = self.requests[key] = self.families.requests.labels(route, str(status), self.model)
        requests.inc()
        for phase, seconds in phases.items():
            latency = self.phases.get(phase)
            if latency is None:
                latency = self.phases[phase] = self.families.latency.labels(phase, self.model)
            latency.observe(seconds)
        # Counted as billed: a request that failed after its tokens were counted billed nothing.
        if num_tokens is not None and status < 400:
            if self.usage is None:
                self.usage = (self.families.inputs.labels(self.model), self.families.tokens.labels(self.model))
            inputs, tokens = self.usage
            inputs.inc(num_inputs or 0)
            tokens.inc(num_tokens)
            size = size_class(num_inputs or 0)
            by_size = self.sizes.get(size)
            if by_size is None:
                families = self.families
                by_size = self.sizes[size] = (families.class_wait.labels(size, self.model),
                                              families.class_tokens.labels(size, self.model))
            wait, class_tokens = by_size
            if "queue" in phases:
                wait.observe(phases["queue"])
            class_tokens.inc(num_tokens)
