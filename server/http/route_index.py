"""What the middleware knows of each request's route, from the declared routes
(server/http/route_spec.py): the label it is counted under in /metrics, and whether it is polled.

Labels are fixed, so that a client probing random paths cannot grow the metrics: a path no route
declares, the docs' pages included, is "other".
"""

from __future__ import annotations

from collections.abc import Iterable

from rose_embed.server.http.route_spec import RouteSpec

OTHER = "other"


class RouteIndex:
    def __init__(self, routes: Iterable[RouteSpec]):
        self._labels: dict[str, str] = {}
        self._prefixes: list[tuple[str, str]] = []  # (what a parametrised path starts with, its label)
        self._polled: set[str] = set()
        for route in routes:
            for path in route.paths:
                label = route.label_of(path)
                if "{" in path:
                    self._prefixes.append((path.split("{", 1)[0], label))
                else:
                    self._labels[path] = label
                if route.is_polled:
                    self._polled.add(path)
        self._prefixes.sort(key=lambda pair: -len(pair[0]))  # the longest match first

    def label(self, path: str) -> str:
        label = self._labels.get(path)
        if label is not None:
            return label
        return next((label for prefix, label in self._prefixes if path.startswith(prefix)), OTHER)

    def is_polled(self, path: str) -> bool:
        """A probe's or a scraper's path, asked every few seconds."""
        return path in self._polled
