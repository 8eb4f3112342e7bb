"""Prometheus metrics (prometheus-client), one registry per app, and the GET /metrics route.

Counters and histograms are updated where things happen (the HTTP middleware, the
batcher's listener); gauges that describe the present (queue depth, engine health, device
memory, graph replays) are read from the runtime when /metrics is scraped.

With --frontend-workers K each front end reports its figures to the stats board
(server/stats_board.py), and /metrics and /health answer for the whole server from every
front end's report (server/metrics_merge.py, server/server_health.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import TYPE_CHECKING

from litestar import Response, get
from litestar.datastructures import State
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.process_collector import ProcessCollector

from engine.batch_outcomes import BatchRecord
from engine.memory import resident_bytes
from server.metrics_merge import carried_counts, families_of, merge, with_carried
from server.server_health import server_health
from server.stats_board import PUBLISH_EVERY_S, Report, StatsBoard

if TYPE_CHECKING:
    from server.runtime import Runtime

_SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_TOKENS = tuple(2**i for i in range(4, 17))  # 16 .. 65536
_SEQS = tuple(2**i for i in range(0, 12))  # 1 .. 2048
_RATE_WINDOW_S = 10.0  # tokens/s is averaged over the batches that finished this recently

logger = logging.getLogger("rose_embed.server")


class Metrics:
    """Everything /metrics shows; `runtime` is read at scrape time."""

    def __init__(self, runtime: Runtime):
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("rose_requests", "HTTP requests by route and status", ["route", "status"], registry=r)
        self.latency = Histogram("rose_request_phase_seconds",
                                 "Time per request in each phase: queue, tokenization, inference, total",
                                 ["phase"], buckets=_SECONDS, registry=r)
        self.batch_tokens = Histogram("rose_batch_tokens", "Tokens per computed batch", buckets=_TOKENS, registry=r)
        self.batch_seqs = Histogram("rose_batch_sequences", "Sequences per computed batch", buckets=_SEQS, registry=r)
        self.tokens = Counter("rose_tokens", "Tokens computed (rate() of it is tokens/s)", registry=r)
        self.sequences = Counter("rose_sequences", "Sequences (inputs) computed", registry=r)
        ProcessCollector(registry=r)  # process_resident_memory_bytes and friends
        r.register(_RuntimeCollector(runtime))
        self.runtime = runtime
        config = runtime.config
        self.board = StatsBoard(config.stats_dir, config.worker_index) if config.stats_dir else None
        self._carried = carried_counts(self.board.previous.families) if self.board and self.board.previous else []
        self._was_ready = False
        self._publisher: asyncio.Task | None = None

    def observe_batch(self, record: BatchRecord) -> None:
        """Batcher listener."""
        self.batch_tokens.observe(record.num_tokens)
        self.batch_seqs.observe(record.num_seqs)
        self.tokens.inc(record.num_tokens)
        self.sequences.inc(record.num_seqs)

    def observe_request(self, route: str, status: int, phases: dict[str, float]) -> None:
        self.requests.labels(route, str(status)).inc()
        for phase, seconds in phases.items():
            self.latency.labels(phase).observe(seconds)

    def render(self) -> bytes:
        if self.board is None:
            return generate_latest(self.registry)
        return generate_latest(_Fixed(merge(self._reports(), time.time())))

    def server_health(self) -> dict:
        """/health for the whole server (with a board only); raises the 503."""
        reports, now = self._reports(), time.time()
        return server_health(reports, merge(reports, now), now)

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
            engines=[replica.describe() for replica in runtime.batcher.replicas] if runtime.batcher else None,
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
    """Gauges and counters owned by other objects, read when scraped."""

    def __init__(self, runtime: Runtime):
        self.runtime = runtime

    def collect(self):
        runtime, batcher = self.runtime, self.runtime.batcher
        yield _gauge("rose_ready", "1 once the model is loaded and warmed up", float(runtime.is_ready))
        yield _gauge("rose_engine_up", "1 while the engine can compute (not dead, not stuck)",
                     float(runtime.is_ready and runtime.engine_problem() is None))
        if batcher is None:
            return
        yield _gauge("rose_queue_tokens", "Tokens waiting in the batcher's queue", batcher.queued_tokens)
        yield _gauge("rose_queue_inputs", "Inputs waiting in the batcher's queue", batcher.queued_inputs)
        yield _gauge("rose_tokens_per_second", f"Tokens computed per second over the last {_RATE_WINDOW_S:.0f} s",
                     _recent_rate(list(batcher.batch_log)))
        yield _counter("rose_inputs_cancelled", "Queued inputs dropped unrun because their client left",
                       batcher.num_cancelled_inputs)
        yield _counter("rose_batches_failed", "Batches whose computation raised", batcher.num_failed_batches)
        # Warm-up runs count too; fault-injection wrappers may hide the runner, hence getattr. An
        # engine group (data parallel) sums the counts its engine processes report.
        runner = getattr(runtime.engine, "runner", runtime.engine)
        yield _counter("rose_graph_replays", "Batches run by replaying a captured CUDA graph",
                       getattr(runner, "num_graph_replays", 0))
        yield _counter("rose_eager_runs", "Batches run eagerly (no CUDA graph; every batch on CPU)",
                       getattr(runner, "num_eager_runs", 0))
        yield _counter("rose_graph_capture_failures", "Batch shapes whose CUDA graph capture failed (they run eagerly)",
                       getattr(runner, "num_capture_failures", 0))
        yield from _per_engine(batcher.replicas)
        yield _device_memory(runtime)
        yield _attention_backends(runtime)

    def describe(self):
        return []  # collected at scrape time only (their presence depends on the runtime)


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


def _recent_rate(records: list[BatchRecord]) -> float:
    now = time.perf_counter()
    recent = [r for r in records if now - r.finished <= _RATE_WINDOW_S]
    return sum(r.num_tokens for r in recent) / _RATE_WINDOW_S


def _per_engine(replicas: list) -> list:
    """One sample per engine (one per device), labelled by index and device."""
    labels = ["engine", "device"]
    serving = GaugeMetricFamily("rose_engine_serving", "1 while this engine is in rotation, 0 once it is out",
                                labels=labels)
    batches = CounterMetricFamily("rose_engine_batches", "Batches the front ends sent this engine (it runs those "
                                  "that wait together as one; rose_graph_replays + rose_eager_runs count what it ran)",
                                  labels=labels)
    tokens = CounterMetricFamily("rose_engine_tokens", "Tokens this engine computed", labels=labels)
    in_flight = GaugeMetricFamily("rose_engine_tokens_in_flight", "Tokens of the batches on this engine now",
                                  labels=labels)
    for replica in replicas:
        key = [str(replica.index), replica.device]
        serving.add_metric(key, float(replica.is_serving))
        batches.add_metric(key, replica.num_batches)
        tokens.add_metric(key, replica.num_tokens)
        in_flight.add_metric(key, replica.tokens_in_flight)
    return [serving, batches, tokens, in_flight]


def _attention_backends(runtime: Runtime) -> GaugeMetricFamily:
    """1 for the attention backend each engine runs per class of batch (token bucket, longest
    sequence's bucket), as chosen at warm-up; "any" where one backend runs everything."""
    family = GaugeMetricFamily("rose_attention_backend", "Attention backend per class of batch, chosen at warm-up "
                               "(--attention-backend auto) or forced", labels=["engine", "bucket", "max_seqlen", "backend"])
    links = getattr(runtime.engine, "replicas", None)
    if links is not None:
        tables = [(str(link.index), link.attention_table) for link in links]
    else:  # an in-process Engine (fault wrappers may hide its runner, as may a test's fake)
        runner = getattr(runtime.engine, "runner", runtime.engine)
        tables = [("0", runner.attention_table())] if hasattr(runner, "attention_table") else []
    for engine, rows in tables:
        for bucket, max_seqlen, backend in rows:
            family.add_metric([engine, bucket, max_seqlen, backend], 1.0)
    return family


def _device_memory(runtime: Runtime) -> GaugeMetricFamily:
    replicas = getattr(runtime.engine, "replicas", None)
    if replicas is not None:
        return _engine_process_memory(replicas)
    family = GaugeMetricFamily("rose_device_memory_bytes", "Memory held on the compute device",
                               labels=["device", "kind"])
    device = getattr(runtime.engine, "device", None)
    if device is not None and device.type == "cuda":
        import torch

        family.add_metric([str(device), "allocated"], torch.cuda.memory_allocated(device))
        family.add_metric([str(device), "reserved"], torch.cuda.memory_reserved(device))
    else:  # on CPU the device memory is the process's own: see process_resident_memory_bytes
        family.add_metric(["cpu", "resident"], _resident_bytes())
    return family


def _engine_process_memory(replicas: list) -> GaugeMetricFamily:
    """Data parallel: each engine process's device memory (as of its last batch), or its resident set on CPU."""
    family = GaugeMetricFamily("rose_device_memory_bytes", "Memory held on the compute device",
                               labels=["engine", "device", "kind"])
    for replica in replicas:
        if replica.device.startswith("cuda"):
            for kind, value in replica.device_bytes.items():
                family.add_metric([str(replica.index), replica.device, kind], value)
        elif replica.is_serving:
            family.add_metric([str(replica.index), "cpu", "resident"], _resident_bytes(replica.pid))
    return family


def _resident_bytes(pid: int | str = "self") -> float:
    return resident_bytes(pid) or 0.0


@get("/metrics", summary="Prometheus metrics", include_in_schema=False)
async def metrics_endpoint(state: State) -> Response:
    # The header as prometheus_client spells it (it names the charset): Litestar would add a second one.
    return Response(content=state.metrics.render(), headers={"content-type": CONTENT_TYPE_LATEST})
