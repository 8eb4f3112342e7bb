"""A request's weight: its share of each batch against the other requests waiting (engine/queue/piece_queue.py).

Every request weighs 1 unless it says otherwise or its API key does. A request may give vLLM's
`priority` field (where its wire has one) or an `X-Priority` header, for clients that cannot add
a body field: an integer, lower meaning sooner, as vLLM reads it; priority p weighs 2 ** -p, so
-1 gets twice a default request's share and 1 half of it. An API key from `--api-keys-file` may
carry a weight of its own, which multiplies: an indexing job's key can be given a smaller
share than the application's. Weights change shares, never admission or order inside a request.
"""

from __future__ import annotations

from litestar import Request

from rose_embed.server.http.errors import invalid_request

MIN_PRIORITY, MAX_PRIORITY = -10, 10
PRIORITY_HEADER = "x-priority"


def priority_weight(priority: int) -> float:
    return 2.0 ** -priority


def check_priority(priority: object, where: str) -> int:
    """The priority as an int within the bounds, or a 400 naming `where` it came from."""
    if isinstance(priority, str):
        try:
            priority = int(priority.strip())
        except ValueError:
            raise invalid_request(f"{where} must be an integer from {MIN_PRIORITY} to {MAX_PRIORITY} "
                                  f"(lower is sooner); got {priority!r}", "priority") from None
    if isinstance(priority, bool) or not isinstance(priority, int) or not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise invalid_request(f"{where} must be an integer from {MIN_PRIORITY} to {MAX_PRIORITY} (lower is sooner); "
                              f"got {priority!r}", "priority")
    return priority


def request_weight(request: Request, priority: int | None = None, key_weight: float = 1.0) -> float:
    """The body's `priority` where given, else the X-Priority header's, times the API key's weight."""
    if priority is not None:
        priority = check_priority(priority, "'priority'")
    elif (header := request.headers.get(PRIORITY_HEADER)) is not None:
        priority = check_priority(header, "the X-Priority header")
    return key_weight * (priority_weight(priority) if priority is not None else 1.0)
