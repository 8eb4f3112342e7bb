"""The whole server's metrics, from every front end's report (server/metrics/stats_board.py).

How a family combines over the front ends' reports:
- counters and histograms add up over every report, a stopped front end's last one included,
  and a front end started in place of one that died carries its predecessor's counts
  (`with_carried`): no sum goes backwards;
- what an engine process says of itself (graph replays, eager runs, capture failures, device
  memory, its attention backend per class of batch, its queue and speed) and what the admission
  board says of the whole server's queue reach every front end alike: the largest figure any
  front end relays (device memory: any ready one; the backend table, the queue and the speed:
  any live one);
- rose_ready and rose_engine_up are 1 where they are 1 on any live front end;
  rose_engine_serving is 0 where any ready front end has that engine out (one that
  stops takes every engine out of its own rotation);
- the rest (the process_* figures, a gauge with no rule here) is given per live front end
  under a `frontend` label, as a sum of them would mean nothing.
Added: rose_frontend_ready{frontend}, 1 while that front end reports and can serve.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily, Metric

from rose_embed.server.metrics.stats_board import Family, Report, front_end_state, is_live


# Whose reports a family is read from: every front end's that ever reported, the live ones',
# or the ready ones' (a front end that stops has taken every engine out of its own rotation).
_ALL, _LIVE, _READY = "all", "live", "ready"


@dataclass(frozen=True)
class _Rule:
    combine: Callable[[float, float], float]
    reports: str  # _ALL, _LIVE or _READY
    per_front_end: bool = False  # each front end's samples kept apart, labelled with its index


_ADD_ALL = _Rule(operator.add, _ALL)
_MAX_ALL = _Rule(max, _ALL)
_MAX_LIVE = _Rule(max, _LIVE)
_MAX_READY = _Rule(max, _READY)
_MIN_READY = _Rule(min, _READY)
_PER_FRONT_END = _Rule(max, _LIVE, per_front_end=True)  # one sample per key: nothing to combine

_RULES = {
    "rose_queue_tokens": _MAX_LIVE,
    "rose_queue_requests": _MAX_LIVE,
    "rose_queue_bound_tokens": _MAX_LIVE,
    "rose_batch_budget_tokens": _MAX_LIVE,
    "rose_queue_pieces": _MAX_LIVE,
    "rose_tokens_per_second": _MAX_LIVE,
    "rose_ready": _MAX_LIVE,
    "rose_engine_up": _MAX_LIVE,
    "rose_engine_serving": _MIN_READY,
    "rose_device_memory_bytes": _MAX_READY,
    "rose_graph_replays": _MAX_ALL,
    "rose_express_batches": _MAX_ALL,
    "rose_eager_runs": _MAX_ALL,
    "rose_graph_capture_failures": _MAX_ALL,
    "rose_attention_backend": _MAX_LIVE,
}


def _rule_of(family: Family) -> _Rule:
    if family.name in _RULES:
        return _RULES[family.name]
    if family.name.startswith("process_") or family.type not in ("counter", "histogram"):
        return _PER_FRONT_END
    return _ADD_ALL


def families_of(metrics: Iterable[Metric]) -> list[Family]:
    """prometheus_client's families in the board's form."""
    return [Family(m.name, m.type, m.documentation, m.unit,
                   [(s.name, s.labels, _for_json(s.value)) for s in m.samples])
            for m in metrics]


def _for_json(value: float) -> float | None:
    return None if math.isnan(value) else value


def carried_counts(families: list[Family]) -> list[Family]:
    """What a front end carries of its predecessor's report: the counts that add up over front ends."""
    return [family for family in families if _rule_of(family) is _ADD_ALL]


def with_carried(own: list[Family], carried: list[Family]) -> list[Family]:
    """A front end's families, its predecessor's counts added in."""
    if not carried:
        return own
    previous = {family.name: family for family in carried}
    combined = []
    for family in own:
        before = previous.pop(family.name, None)
        if before is None:
            combined.append(family)
            continue
        merged = _Merged(family)
        for one in (family, before):
            for name, labels, value in one.samples:
                merged.add(name, labels, value, operator.add)
        combined.append(merged.family())
    return combined + list(previous.values())  # counts it has not made yet itself


def merge(reports: list[Report], now: float) -> list[Metric]:
    """The whole server's families, as /metrics exposes them."""
    merged: dict[str, _Merged] = {}
    for report in reports:
        live = is_live(report, now)
        read_by = {_ALL, _LIVE, _READY} if live and report.ready else {_ALL, _LIVE} if live else {_ALL}
        for family in report.families:
            rule = _rule_of(family)
            if rule.reports not in read_by:
                continue
            target = merged.setdefault(family.name, _Merged(family))
            for name, labels, value in family.samples:
                if rule.per_front_end:
                    labels = {**labels, "frontend": str(report.index)}
                target.add(name, labels, value, rule.combine)
    ready = GaugeMetricFamily("rose_frontend_ready", "1 while this front-end process reports and can serve, "
                              "0 while it starts, stops, or is gone", labels=["frontend"])
    for report in reports:
        ready.add_metric([str(report.index)], float(front_end_state(report, now)[0] == "serving"))
    return [target.metric() for target in merged.values()] + [ready]


class _Merged:
    """One family's samples being combined; the first report's order is kept (histograms need theirs)."""

    def __init__(self, family: Family):
        self.head = family  # name, type, documentation, unit
        self.samples: dict[tuple, list] = {}

    def add(self, name: str, labels: dict[str, str], value: float | None, combine: Callable) -> None:
        value = math.nan if value is None else value
        key = (name, tuple(sorted(labels.items())))
        seen = self.samples.get(key)
        if seen is None:
            self.samples[key] = [name, labels, value]
        else:  # a series' creation time is its first front end's
            seen[2] = min(seen[2], value) if name.endswith("_created") else combine(seen[2], value)

    def family(self) -> Family:
        head = self.head
        return Family(head.name, head.type, head.documentation, head.unit,
                      [(name, labels, _for_json(value)) for name, labels, value in self.samples.values()])

    def metric(self) -> Metric:
        metric = Metric(self.head.name, self.head.documentation, self.head.type, self.head.unit)
        for name, labels, value in self.samples.values():
            metric.add_sample(name, labels, value)
        return metric
