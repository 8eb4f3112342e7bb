"""/health for the whole server (`--frontend-workers K`), from every front end's report (server/stats_board.py).

200 while the server can serve: some front end serving and some engine serving ("degraded"
while a front end or an engine is not); 503 otherwise: model_not_ready while front ends are
still starting (or stopping), engine_unavailable when the engines cannot compute.
"""

from __future__ import annotations

from typing import Any

from prometheus_client.core import Metric

from server.errors import engine_unavailable, not_ready
from server.stats_board import Report, front_end_state, is_live


def server_health(reports: list[Report], merged: list[Metric], now: float) -> dict:
    """The body of a 200; raises the 503 where the server cannot serve."""
    front_ends = [_front_end(report, now) for report in reports]
    # A front end that stops takes every engine out of its own rotation: only the ready ones' views count.
    views = [r.engines for r in reports if r.engines is not None and r.ready and is_live(r, now)]
    engines = _engines(views, _per_engine(merged, "rose_engine_batches"), _per_engine(merged, "rose_engine_tokens"))
    if not any(f["state"] == "serving" for f in front_ends):
        problems = [r.problem for r in reports if r.ready and r.problem is not None and is_live(r, now)]
        raise engine_unavailable(problems[0]) if problems else not_ready()
    if not any(e["state"] == "serving" for e in engines):
        reasons = [e["reason"] for e in engines if "reason" in e]
        raise engine_unavailable(reasons[0] if reasons else "no engine is serving")
    everything_serves = all(part["state"] == "serving" for part in front_ends + engines)
    return {"status": "ok" if everything_serves else "degraded", "frontends": front_ends, "engines": engines}


def _front_end(report: Report, now: float) -> dict:
    state, reason = front_end_state(report, now)
    entry: dict[str, Any] = {"index": report.index, "pid": report.pid, "state": state}
    if reason is not None:
        entry["reason"] = reason
    entry.update(last_seen_s=round(max(0.0, now - report.updated), 3), restarts=report.restarts)
    return entry


def _engines(views: list[list[dict]], batches: dict[str, float], tokens: dict[str, float]) -> list[dict]:
    """Each engine as the ready front ends see it: out where any of them has it out; its batches and
    tokens are every front end's (the counters'); what is in flight, the ready ones'."""
    seen: dict[int, list[dict]] = {}
    for view in views:
        for engine in view:
            seen.setdefault(engine["index"], []).append(engine)
    engines = []
    for index in sorted(seen):
        views_of_it = seen[index]
        out = [engine for engine in views_of_it if engine["state"] != "serving"]
        first = views_of_it[0]
        entry: dict[str, Any] = {"index": index, "device": first["device"], "pid": first["pid"],
                                 "state": out[0]["state"] if out else "serving"}
        if out:
            entry["reason"] = out[0].get("reason")
        entry.update(batches=int(batches.get(str(index), 0)), tokens=int(tokens.get(str(index), 0)),
                     batches_in_flight=sum(e["batches_in_flight"] for e in views_of_it),
                     tokens_in_flight=sum(e["tokens_in_flight"] for e in views_of_it))
        engines.append(entry)
    return engines


def _per_engine(merged: list[Metric], family: str) -> dict[str, float]:
    """A per-engine counter's values by engine index."""
    for metric in merged:
        if metric.name == family:
            return {s.labels["engine"]: s.value for s in metric.samples if s.name.endswith("_total")}
    return {}
