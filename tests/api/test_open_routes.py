"""The routes that answer without a key on a server with keys: /health always (probes), /metrics
and /docs unless --protect-metrics-and-docs; the OpenAPI document says which need the key
as the server really checks it (fake engine, in process)."""

from __future__ import annotations

import pytest

from rose_embed.server.cli.main import build_parser, config_from_args
from tests.support.client_support import API_KEYS
from tests.support.fake_engine import fake_config, serve
from tests.support.helpers import assert_envelope

AUTH = {"Authorization": f"Bearer {API_KEYS[0]}"}
DOCS = ["/docs", "/docs/openapi.json", "/docs/assets/swagger-ui.css"]


@pytest.fixture(scope="module")
def locked(fake):
    with serve(fake, fake_config(api_keys=API_KEYS)) as client:
        yield client


@pytest.fixture(scope="module")
def protected(fake):
    with serve(fake, fake_config(api_keys=API_KEYS, protect_metrics_and_docs=True)) as client:
        yield client


def test_without_the_flag_health_metrics_and_the_docs_answer_without_a_key(locked):
    for path in ["/health", "/metrics", *DOCS]:
        assert locked.get(path).status_code == 200, path
    assert_envelope(locked.get("/v1/models"), 401, "invalid_api_key")


def test_the_flag_puts_metrics_and_the_docs_behind_the_key_and_leaves_health_open(protected):
    assert protected.get("/health").status_code == 200
    for path in ["/metrics", *DOCS]:
        assert_envelope(protected.get(path), 401, "invalid_api_key")
        assert protected.get(path, headers=AUTH).status_code == 200, path
    assert "rose_requests_total" in protected.get("/metrics", headers=AUTH).text


def _needs_a_key(schema: dict, operation: dict) -> bool:
    """What the document claims: an operation's own security, else the document's."""
    security = operation.get("security", schema.get("security", []))
    return any(requirement for requirement in security)


@pytest.mark.parametrize("client_name", ["locked", "protected"])
def test_the_document_claims_a_key_exactly_where_the_server_asks_for_one(request, client_name):
    client = request.getfixturevalue(client_name)
    schema = client.get("/docs/openapi.json", headers=AUTH).json()
    checked = 0
    for path, operations in schema["paths"].items():
        if "{" in path:
            path = path.replace("{model_id}", "some-model")
        for method, operation in operations.items():
            answer = client.request(method.upper(), path, json={})
            assert (answer.status_code == 401) == _needs_a_key(schema, operation), (method, path, answer.status_code)
            checked += 1
    assert checked >= 15  # every route the document lists
    assert not _needs_a_key(schema, schema["paths"]["/health"]["get"])


def test_the_flag_without_a_key_is_refused(capsys, monkeypatch):
    monkeypatch.delenv("ROSE_EMBED_API_KEY", raising=False)
    args = build_parser().parse_args(["serve", "--devices", "cpu", "--protect-metrics-and-docs"])
    with pytest.raises(ValueError, match="--protect-metrics-and-docs: needs --api-key"):
        config_from_args(args)
    with_key = build_parser().parse_args(["serve", "--devices", "cpu", "--protect-metrics-and-docs",
                                          "--api-key", API_KEYS[0]])
    assert config_from_args(with_key).protect_metrics_and_docs is True
    assert config_from_args(build_parser().parse_args(["serve", "--devices", "cpu"])).protect_metrics_and_docs is False
