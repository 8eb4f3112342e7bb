"""The per-request series of /metrics, kept apart per served model.

Every request is counted under the `model` label: the served id of the model a route picked for it
(Runtime.pick, through route_support.pick_model), or "" for a request answered before any model was
picked (an unknown model's 404, a body that does not parse, a 503 while loading) or on a route that
computes with none (/health, /metrics, /v1/models). An empty label value is what Prometheus stores as
no label at all, and it cannot be taken for a served id, which is never empty. A server with an
embedder and a reranker side by side shows each one's traffic; a sum over `model` is the server's.

This runs once per request on a front end that answers tens of thousands a second, and
prometheus_client's labels() takes a lock and builds its key on every call: so each model's
children (by route and status, by phase) are looked up once and kept.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

_SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


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
