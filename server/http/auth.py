"""Optional API keys: `Authorization: Bearer <key>`, checked in constant time.

The OpenAI SDK always sends a bearer token (a dummy when the user has none), so a server
without keys ignores the header, and one with keys answers 401 in OpenAI's envelope.
"""

from __future__ import annotations

import hmac

from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler

from rose_embed.server.http.errors import APIError

# Readiness probes stay reachable without a key (a probe that cannot send one would take the pod
# out of service); so do the metrics scraper and the API docs (the page, /docs/openapi.json and
# the page's files), unless --protect-metrics-and-docs.
PROBE_PATHS = ("/health",)
METRICS_PATHS = ("/metrics",)
DOCS_PREFIXES = ("/docs",)


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


def api_key_guard(keys: tuple[str, ...], protect_metrics_and_docs: bool = False):
    """A Litestar guard that admits requests whose bearer token is one of `keys`, and any request
    to the open routes."""
    open_paths = PROBE_PATHS if protect_metrics_and_docs else PROBE_PATHS + METRICS_PATHS
    open_prefixes = () if protect_metrics_and_docs else DOCS_PREFIXES

    def guard(connection: ASGIConnection, _: BaseRouteHandler) -> None:
        path = connection.scope["path"]
        if path in open_paths or path.startswith(open_prefixes):
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
