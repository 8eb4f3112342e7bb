"""/health for the whole server (`--frontend-workers K`), from every front end's report (server/metrics/stats_board.py).

200 while the server can serve: some front end serving and some engine serving ("degraded"
while a front end or an engine is not); 503 otherwise: model_not_ready while front ends are
still starting (or stopping), engine_unavailable when the engines cannot compute.
"""

from __future__ import annotations

from typing import Any

from rose_embed.server.http.errors import engine_unavailable, not_ready
from rose_embed.server.metrics.stats_board import Report, front_end_state, is_live


def server_health(reports: list[Report], now: float) -> dict:
    """The body of a 200; raises the 503 where the server cannot serve."""
    front_ends = [_front_end(report, now) for report in reports]
    # A front end that stops takes every engine out of its own rotation: only the ready ones' views count.
    views = [r.engines for r in reports if r.engines is not None and r.ready and is_live(r, now)]
    engines = _engines(views)
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


def _engines(views: list[list[dict]]) -> list[dict]:
    """Each engine as the ready front ends see it: out where any of them has it out; its figures
    are its board's, the same in every view (the latest taken)."""
    seen: dict[int, list[dict]] = {}
    for view in views:
        for engine in view:
            seen.setdefault(engine["index"], []).append(engine)
    engines = []
    for index in sorted(seen):
        views_of_it = seen[index]
        out = [engine for engine in views_of_it if engine["state"] != "serving"]
        latest = max(views_of_it, key=lambda e: e["batches"])
        entry: dict[str, Any] = {"index": index, "device": latest["device"], "pid": latest["pid"],
                                 "state": out[0]["state"] if out else "serving"}
        if out:
            entry["reason"] = out[0].get("reason")
        entry.update(batches=latest["batches"], tokens=latest["tokens"], queued_tokens=latest["queued_tokens"],
                     is_busy=latest.get("is_busy", False), pieces_sent=sum(e["pieces_sent"] for e in views_of_it))
        engines.append(entry)
    return engines
