"""Prometheus metrics (prometheus-client), one registry per app, and the GET /metrics route.

A front end's own figures (requests, their phases, inputs and tokens, each under the model that
computed it; whether it is ready) are counted where things happen (the HTTP middleware, through
server/metrics/request_metrics.py) or read from the runtime when /metrics is scraped.
The engines' figures (their queues, the batches they ran, graph replays, device memory) are
read off each engine's board (engine/contract/board.py) at scrape time: every front end reads the same
boards, so whichever answers gives the whole server's.

With --frontend-workers K each front end reports its own figures to the stats board
(server/metrics/stats_board.py), and /metrics and /health answer for the whole server from every
front end's report (server/metrics/merge.py, server/metrics/health.py) and the engines' boards.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import TYPE_CHECKING

from litestar import Response
from litestar.datastructures import State
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.process_collector import ProcessCollector

from rose_embed.engine.contract.memory import resident_bytes
from rose_embed.server.http.route_spec import RouteSpec
from rose_embed.server.metrics.merge import carried_counts, families_of, merge, with_carried
from rose_embed.server.metrics.request_metrics import RequestSeries
from rose_embed.server.metrics.health import server_health
from rose_embed.server.metrics.stats_board import PUBLISH_EVERY_S, Report, StatsBoard

if TYPE_CHECKING:
    from rose_embed.server.runtime import Runtime

logger = logging.getLogger("rose_embed.server")


class Metrics:
    """Everything /metrics shows; `runtime` is read at scrape time."""

    def __init__(self, runtime: Runtime):
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = RequestSeries(r)  # per request, by model (server/metrics/request_metrics.py)
        self.refused = Counter("rose_http_refused", "Connections the HTTP layer answered itself and closed before "
                               "any route ran (server/http/guarded_http.py), by the answer's code",
                               ["code"], registry=r)
        ProcessCollector(registry=r)  # process_resident_memory_bytes and friends
        r.register(_RuntimeCollector(runtime))
        self.engines = _EngineCollector(runtime)  # not in the registry: the front ends' reports would add it up K times
        self.runtime = runtime
        config = runtime.config
        self.board = StatsBoard(config.stats_dir, config.worker_index) if config.stats_dir else None
        self._carried = carried_counts(self.board.previous.families) if self.board and self.board.previous else []
        self._was_ready = False
        self._publisher: asyncio.Task | None = None

    def observe_request(self, route: str, status: int, phases: dict[str, float], model: str,
                        num_inputs: int | None, num_tokens: int | None) -> None:
        """One request, answered: `model` is the served id that computed it ("" where none was picked)."""
        self.requests.observe(route, status, phases, model, num_inputs, num_tokens)

    def count_refused(self, code: str) -> None:
        """One request or connection the HTTP layer refused: `code` as its answer gives it."""
        self.refused.labels(code).inc()

    def render(self) -> bytes:
        own = list(self.registry.collect()) if self.board is None else merge(self._reports(), time.time())
        return generate_latest(_Fixed(own + list(self.engines.collect())))

    def server_health(self) -> dict:
        """/health for the whole server (with a board only); raises the 503."""
        reports, now = self._reports(), time.time()
        return server_health(reports, now)

    def _reports(self) -> list[Report]:
        self.publish()  # this front end's own figures as of now
        return self.board.reports()

    def publish(self) -> None:
        """Write this front end's report to the board."""
        runtime = self.runtime
        self._was_ready = self._was_ready or runtime.is_ready
        self.board.publish(Report(
            index=self.board.index, pid=os.getpid(), updated=time.time(), ready=runtime.is_ready,
            was_ready=self._was_ready, problem=runtime.engine_problem(), restarts=self.board.restarts,
            engines=runtime.engine_states() if runtime.is_ready else None,
            families=with_carried(families_of(self.registry.collect()), self._carried),
        ))

    def start_publishing(self) -> None:
        """In the lifespan: report every PUBLISH_EVERY_S (a scrape reads the other front ends' reports)."""
        if self.board is not None:
            self._publisher = asyncio.get_running_loop().create_task(self._publish_periodically(),
                                                                     name="rose-stats-board")

    def stop_publishing(self) -> None:
        """The last report (every count made), once the runtime has stopped."""
        if self._publisher is None:
            return
        self._publisher.cancel()
        self.publish()

    async def _publish_periodically(self) -> None:
        while True:
            try:
                self.publish()
            except Exception:  # a report that cannot be made must not end the reporting
                logger.exception("this front end's report to the stats board failed")
            await asyncio.sleep(PUBLISH_EVERY_S)


class _RuntimeCollector:
    """This front end's view, read when scraped."""

    def __init__(self, runtime: Runtime):
        self.runtime = runtime

    def collect(self):
        runtime = self.runtime
        yield _gauge("rose_ready", "1 once the model is loaded and warmed up", float(runtime.is_ready))
        yield _gauge("rose_engine_up", "1 while an engine can compute (not every one dead or stuck)",
                     float(runtime.is_ready and runtime.engine_problem() is None))

    def describe(self):
        return []  # collected at scrape time only


class _EngineCollector:
    """The engines' figures, off their boards (the same for every front end), read when scraped."""

    def __init__(self, runtime: Runtime):
        self.runtime = runtime

    def collect(self):
        engines = self.runtime.engines
        if engines is None or not self.runtime.is_ready:
            return
        links = engines.links
        boards = [link.board_snapshot() for link in links]

        def total(field: str) -> float:
            return sum(board[field] for board in boards)

        waiting, num_requests, _ = engines.admission.board.totals()
        yield _gauge("rose_queue_tokens", "Tokens of admitted requests not yet computed, wherever they wait (in "
                     "front ends, before or after tokenizing, in the engines' queues, on the devices)", waiting)
        yield _gauge("rose_queue_requests", "Admitted requests not yet answered", float(num_requests))
        yield _gauge("rose_queue_bound_tokens", "The queue's bound: past it, requests other than small ones get 429",
                     engines.admission.bound)
        yield _gauge("rose_batch_budget_tokens", "The token budget the engines cut batches by, as warm-up chose it "
                     "(or --max-batch-tokens)", float(engines.max_batch_tokens or 0))
        yield _gauge("rose_queue_pieces", "Pieces (parts of requests) waiting in the engines' queues",
                     total("queued_pieces"))
        yield _gauge("rose_tokens_per_second", "Tokens computed per second over the last 10 s",
                     total("tokens_per_second"))
        yield _counter("rose_tokens", "Tokens computed (rate() of it is tokens/s)", total("tokens"))
        yield _counter("rose_sequences", "Sequences (inputs, or their windows) computed", total("sequences"))
        yield _counter("rose_pieces_cancelled", "Pieces dropped unrun because their request ended (client gone, "
                       "timeout, another piece failed)", total("pieces_cancelled"))
        yield _counter("rose_express_batches", "Batches of small requests run between the layers of a larger batch "
                       "on the CPU (docs/queue.md)", total("express_batches"))
        yield _counter("rose_batches_failed", "Pieces' batches whose computation raised (a batch of several "
                       "pieces that raises runs again piece by piece: only those that fail alone count)",
                       total("batches_failed"))
        # Warm-up runs count too.
        yield _counter("rose_graph_replays", "Batches run by replaying a captured CUDA graph", total("graph_replays"))
        yield _counter("rose_eager_runs", "Batches run eagerly (no CUDA graph; every batch on CPU)", total("eager_runs"))
        yield _counter("rose_graph_capture_failures", "Batch shapes whose CUDA graph capture failed (they run eagerly)",
                       total("capture_failures"))
        yield _histogram("rose_batch_tokens", "Tokens per computed batch", links, "tokens")
        yield _histogram("rose_batch_sequences", "Sequences per computed batch", links, "sequences")
        yield from _per_engine(links, boards)
        yield _device_memory(links, boards)
        yield _attention_backends(links)

    def describe(self):
        return []


class _Fixed:
    """Families made beforehand, for generate_latest."""

    def __init__(self, metrics: list):
        self.metrics = metrics

    def collect(self):
        return self.metrics


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


def _histogram(name: str, doc: str, links: list, kind: str) -> HistogramMetricFamily:
    """One histogram over every engine's batches (the engines count them in the same buckets)."""
    counts: dict[str, float] = {}
    total = 0.0
    for link in links:
        buckets, sum_value = link.board_histogram(kind)
        total += sum_value
        for bound, count in buckets:
            counts[bound] = counts.get(bound, 0.0) + count
    return HistogramMetricFamily(name, doc, buckets=list(counts.items()) or [("+Inf", 0.0)], sum_value=total)


def _per_engine(links: list, boards: list[dict]) -> list:
    """One sample per engine (one per device), labelled by index and device."""
    labels = ["engine", "device"]
    serving = GaugeMetricFamily("rose_engine_serving", "1 while this engine is in rotation, 0 once it is out",
                                labels=labels)
    batches = CounterMetricFamily("rose_engine_batches", "Batches this engine ran", labels=labels)
    tokens = CounterMetricFamily("rose_engine_tokens", "Tokens this engine computed", labels=labels)
    queued = GaugeMetricFamily("rose_engine_queued_tokens", "Tokens waiting in this engine's queue", labels=labels)
    for link, board in zip(links, boards):
        key = [str(link.index), link.device]
        serving.add_metric(key, float(link.is_serving))
        batches.add_metric(key, board["batches"])
        tokens.add_metric(key, board["tokens"])
        queued.add_metric(key, board["queued_tokens"])
    return [serving, batches, tokens, queued]


def _attention_backends(links: list) -> GaugeMetricFamily:
    """1 for the attention backend each engine runs per class of batch (token bucket, longest
    sequence's bucket), as chosen at warm-up; "any" where one backend runs everything."""
    family = GaugeMetricFamily("rose_attention_backend", "Attention backend per class of batch, chosen at warm-up "
                               "(--attention-backend auto) or forced", labels=["engine", "bucket", "max_seqlen", "backend"])
    for link in links:
        for bucket, max_seqlen, backend in link.attention_table:
            family.add_metric([str(link.index), bucket, max_seqlen, backend], 1.0)
    return family


def _device_memory(links: list, boards: list[dict]) -> GaugeMetricFamily:
    """Each engine's device memory (as of its last batches), or its process's resident set on CPU."""
    family = GaugeMetricFamily("rose_device_memory_bytes", "Memory held on the compute device",
                               labels=["engine", "device", "kind"])
    for link, board in zip(links, boards):
        if link.device.startswith("cuda"):
            family.add_metric([str(link.index), link.device, "allocated"], board["device_allocated"])
            family.add_metric([str(link.index), link.device, "reserved"], board["device_reserved"])
        elif link.is_serving:
            family.add_metric([str(link.index), "cpu", "resident"], resident_bytes(link.pid) or 0.0)
    return family


async def metrics_endpoint(state: State) -> Response:
    # The header as prometheus_client spells it (it names the charset): Litestar would add a second one.
    return Response(content=state.metrics.render(), headers={"content-type": CONTENT_TYPE_LATEST})


ROUTES = [RouteSpec(metrics_endpoint, "GET", ("/metrics",), "Prometheus metrics", {}, access="metrics",
                    is_documented=False, is_polled=True)]
