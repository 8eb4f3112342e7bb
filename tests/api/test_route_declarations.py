"""Every route the app registers is declared once (server/http/route_spec.py), and its metrics
label, OpenAPI entry and access to API keys follow from that declaration: a route registered
without one of them fails here."""

from __future__ import annotations

import pytest

from rose_embed.server.app import create_app
from rose_embed.server.http.access import ACCESS_KEY
from rose_embed.server.http.route_index import OTHER, RouteIndex
from rose_embed.server.routes.all_routes import ROUTES
from tests.support.fake_engine import FakeEngine, fake_config, serve

# The docs' own routes (the page, the document, Swagger UI's files) are Litestar's: declared open as
# docs, counted with unknown paths, and not in the document they serve.
DOCS_PREFIX = "/docs"


@pytest.fixture(scope="module")
def app():
    return create_app(fake_config(), FakeEngine())


@pytest.fixture(scope="module")
def document() -> dict:
    with serve(FakeEngine()) as client:
        return client.get("/docs/openapi.json").json()


def _handlers(app):
    """Every registered handler but Litestar's own answers to OPTIONS (the guard gives those the
    access of the route they answer for)."""
    for route in app.routes:
        for handler in route.route_handlers:
            if handler.http_methods != {"OPTIONS"}:
                yield route.path, handler


def test_every_registered_handler_declares_its_access(app):
    for path, handler in _handlers(app):
        assert handler.opt.get(ACCESS_KEY) in {"key", "open", "metrics", "docs"}, path


def test_every_registered_route_is_declared_with_a_label(app):
    declared = {path for route in ROUTES for path in route.paths}
    index = RouteIndex(ROUTES)
    for path, handler in _handlers(app):
        if path.startswith(DOCS_PREFIX):
            assert handler.opt[ACCESS_KEY] == "docs", path
            assert index.label(path) == OTHER
            continue
        assert path in declared, f"{path} is registered but not declared in server/routes/all_routes.py"
        assert index.label(path.replace("{model_id:path}", "any-model")) != OTHER, path


def test_every_declared_route_is_in_the_document_as_declared(document):
    for route in ROUTES:
        for path in route.paths:
            entry = document["paths"].get(path.replace(":path", ""), {}).get(route.method.lower())
            if not route.is_documented:
                assert entry is None, path
                continue
            assert entry is not None, f"{route.method} {path} is declared but not in the OpenAPI document"
            assert entry["summary"] == route.summary
            assert set(map(int, entry["responses"])) >= set(route.responses), path
            assert ("requestBody" in entry) == (route.body is not None), path
            # An open route overrides the document's bearer requirement with an empty one.
            assert (entry.get("security") == [{}]) == (route.access == "open"), path


def test_each_path_is_declared_once():
    paths = [(route.method, path) for route in ROUTES for path in route.paths]
    assert len(paths) == len(set(paths))


def test_labels_of_parametrised_paths_and_unknown_ones():
    index = RouteIndex(ROUTES)
    assert index.label("/v1/models/org/name") == "/v1/models/{model}"
    assert index.label("/models/") == "/models/{model}"
    assert index.label("/v1/v1/models/x") == OTHER
    assert index.label("/docs") == OTHER
    assert index.is_polled("/health") and index.is_polled("/metrics") and not index.is_polled("/v1/embeddings")
