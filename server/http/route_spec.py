"""A route, declared once: its method and paths, its entry in the OpenAPI document, the label its
requests are counted under in /metrics, who may call it where the server has API keys, and
whether it is polled (its successes are logged quietly).

app.py registers the Litestar handler each declaration builds; the middleware takes its labels
(server/http/route_index.py) and the API-key guard its access (server/http/auth.py) from the
same declarations, so a route cannot be added without them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

import msgspec
from litestar.handlers import HTTPRouteHandler
from litestar.openapi import ResponseSpec
from litestar.openapi.spec import Operation, Schema

from rose_embed.server.http.access import Access, access_opt
from rose_embed.server.http.openapi import NO_KEY_NEEDED
from rose_embed.server.http.openapi_schema import body_operation


@dataclass(frozen=True)
class RouteSpec:
    """`body`: the Struct the handler decodes its body with itself (strictly), published as the
    request body, which Litestar cannot infer without a `data` parameter. `labels`: the metrics
    label of a path with a parameter (a path without one is its own label)."""

    handler: Callable
    method: Literal["GET", "POST"]
    paths: tuple[str, ...]
    summary: str
    responses: Mapping[int, ResponseSpec]
    body: type[msgspec.Struct] | None = None
    # The 200 answer's schema where Litestar's, read from the handler's return type, cannot say it all
    # (server/http/openapi_schema.py's `struct_schema` with `items`); only with `body`.
    answer: Schema | None = None
    access: Access = "key"
    is_documented: bool = True
    is_polled: bool = False  # asked every few seconds (probes, scrapes): its answers would drown the log
    labels: Mapping[str, str] = field(default_factory=dict)

    def label_of(self, path: str) -> str:
        """The metrics label of one of its paths."""
        if "{" not in path:
            return path
        return self.labels[path]

    def route_handler(self) -> HTTPRouteHandler:
        decorate = HTTPRouteHandler(
            path=list(self.paths), http_method=self.method, status_code=200, summary=self.summary,
            operation_class=body_operation(self.body, self.answer) if self.body is not None else Operation,
            responses=dict(self.responses), include_in_schema=self.is_documented,
            security=NO_KEY_NEEDED if self.access == "open" else None, opt=access_opt(self.access))
        return decorate(self.handler)
