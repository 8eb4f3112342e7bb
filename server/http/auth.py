"""Optional API keys: `Authorization: Bearer <key>`, checked in constant time.

The OpenAI SDK always sends a bearer token (a dummy when the user has none), so a server
without keys ignores the header, and one with keys answers 401 in OpenAI's envelope.
"""

from __future__ import annotations

import hmac

from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler

from rose_embed.server.http.errors import APIError
from rose_embed.server.http.access import ACCESS_KEY


def _bearer_token(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def _mask(key: str) -> str:
    # OpenAI echoes a masked key so that users can tell which one they sent.
    return key[:4] + "*" * min(max(len(key) - 8, 0), 8) + key[-4:] if len(key) > 8 else "*" * len(key)


def is_valid_key(token: str, keys: tuple[str, ...]) -> bool:
    """Compare against every key, always all of them, each in constant time."""
    given = token.encode()
    matched = False
    for key in keys:
        matched |= hmac.compare_digest(given, key.encode())
    return matched


def _access(connection: ASGIConnection, route_handler: BaseRouteHandler) -> str:
    """The handler's declared access; for Litestar's own answer to OPTIONS, which no declaration
    builds, the access of the route it answers for."""
    access = route_handler.opt.get(ACCESS_KEY)
    if access is not None:
        return access
    path = next(iter(route_handler.paths))
    declared = (handler.opt.get(ACCESS_KEY) for handler in connection.app.route_handler_method_map[path].values())
    return next(access for access in declared if access is not None)


def api_key_guard(keys: tuple[str, ...], protect_metrics_and_docs: bool = False):
    """A Litestar guard that admits requests whose bearer token is one of `keys`, and any request
    to a route declared open (server/http/access.py). Readiness probes stay reachable without a
    key (a probe that cannot send one would take the pod out of service); so do the metrics scraper
    and the API docs, unless --protect-metrics-and-docs."""
    open_access = {"open"} if protect_metrics_and_docs else {"open", "metrics", "docs"}

    def guard(connection: ASGIConnection, route_handler: BaseRouteHandler) -> None:
        if _access(connection, route_handler) in open_access:
            return
        token = _bearer_token(connection.headers.get("authorization"))
        if token is None:
            raise APIError(
                401,
                "You didn't provide an API key. You need to provide your API key in an Authorization "
                "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
                "invalid_request_error", None, "invalid_api_key",
            )
        if not is_valid_key(token, keys):
            raise APIError(
                401, f"Incorrect API key provided: {_mask(token)}.", "invalid_request_error", None, "invalid_api_key"
            )

    return guard
