"""Hostile input: property-based fuzzing from OpenAI's contract, and hand-made bodies.

No input may bring a 5xx, a hang, a traceback or a path; afterwards the server still
answers correctly. The fuzzing runs in process on the fake engine; the real server process
gets the hand-made bodies too, a body refused by its declared length, and must then still
give the real model's vectors.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import schemathesis
import yaml
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.config import SchemathesisConfig
from schemathesis.checks import not_a_server_error, response_schema_conformance

from tests.support.fake_engine import BASE_URL, FAKE_MODEL
from tests.support.helpers import MODEL, assert_envelope, raw_post

CONTRACT = Path(__file__).resolve().parents[1] / "data" / "openai-embeddings.openapi.yaml"
FUZZ = settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))


def _contract():
    """The contract with `model` narrowed to the served name and `encoding_format` to float."""
    raw = yaml.safe_load(CONTRACT.read_text())
    props = raw["components"]["schemas"]["CreateEmbeddingRequest"]["properties"]
    props["model"] = {"type": "string", "enum": [FAKE_MODEL]}
    props["encoding_format"] = {"type": "string", "enum": ["float"]}
    # Schemathesis keeps its cache and crash reports under `.schemathesis/` in the working
    # directory unless told otherwise; a test run must leave the checkout as it found it.
    return schemathesis.openapi.from_dict(raw, config=SchemathesisConfig.from_dict({"cache": {"enabled": False}}))


SCHEMA = _contract()
EMBEDDINGS = SCHEMA["/embeddings"]["POST"]
MODELS = SCHEMA["/models"]["GET"]


def _check(client, case) -> None:
    kwargs = case.as_transport_kwargs(base_url=BASE_URL + "/v1")
    if "data" in kwargs:  # a raw body, in httpx's terms
        kwargs["content"] = kwargs.pop("data")
    started = time.monotonic()
    response = client.request(**kwargs)
    assert time.monotonic() - started < 30
    case.validate_response(response, checks=[not_a_server_error, response_schema_conformance])
    if response.status_code != 200:
        assert_envelope(response, response.status_code)


@FUZZ
@given(case=EMBEDDINGS.as_strategy())
def test_contract_valid_requests(client, case):
    _check(client, case)


@FUZZ
@given(case=EMBEDDINGS.as_strategy(generation_mode=GenerationMode.NEGATIVE))
def test_contract_invalid_requests(client, case):
    _check(client, case)


@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=MODELS.as_strategy())
def test_contract_models(client, case):
    _check(client, case)


NEST = 100_000
HOSTILE = [
    # (name, content type or None, raw body)
    ("deeply nested arrays", "application/json", b'{"input":' + b"[" * NEST + b"]" * NEST + b"}"),
    ("deeply nested objects", "application/json", b'{"x":' * NEST + b"1" + b"}" * NEST),
    ("nested unknown field", "application/json", b'{"input":"a","x":' + b"[" * NEST + b"]" * NEST + b"}"),
    ("float overflow", "application/json", b'{"input":[1e400]}'),
    ("huge token id", "application/json", b'{"input":[[123456789012345678901234567890]]}'),
    ("huge negative token id", "application/json", b'{"input":[-99999999999999999999999]}'),
    ("huge dimensions", "application/json", b'{"input":"a","dimensions":99999999999999999999999}'),
    ("float dimensions", "application/json", b'{"input":"a","dimensions":1e308}'),
    ("NaN input", "application/json", b'{"input":NaN}'),
    ("Infinity token", "application/json", b'{"input":[Infinity]}'),
    ("NaN dimensions", "application/json", b'{"input":"a","dimensions":NaN}'),
    ("invalid UTF-8", "application/json", b'{"input":"\xff\xfe\xfd"}'),
    ("overlong UTF-8", "application/json", b'{"input":"\xc0\xaf"}'),
    ("lone surrogate escape", "application/json", b'{"input":"\\ud800"}'),
    ("NUL byte", "application/json", b'{"input":"a\x00b"}'),
    ("UTF-16 body", "application/json", '{"input":"hi"}'.encode("utf-16")),
    ("empty body", "application/json", b""),
    ("null", "application/json", b"null"),
    ("bare string", "application/json", b'"hello"'),
    ("empty object", "application/json", b"{}"),
    ("duplicate keys", "application/json", b'{"input":"a","input":5}'),
    ("truncated", "application/json", b'{"input":["a", "b'),
    ("trailing garbage", "application/json", b'{"input":"a"} xyz'),
    ("model as object", "application/json", b'{"input":"a","model":{"$ne":null}}'),
    ("input as object", "application/json", b'{"input":{"text":"a"}}'),
    ("2049 empty strings", "application/json", b'{"input":[' + b",".join([b'""'] * 2049) + b"]}"),
    ("100k token ids", "application/json", b'{"input":[' + b",".join([b"7"] * 100_000) + b"]}"),
    ("form body", "application/x-www-form-urlencoded", b"input=hello&model=x"),
    ("multipart body", "multipart/form-data; boundary=xx", b"--xx\r\nContent-Disposition: form-data; name=\"input\"\r\n\r\nhi\r\n--xx--\r\n"),
    ("XML", "application/xml", b"<input>hi</input>"),
    ("no content type", None, b'{"input":"a"}'),
    ("gzip claimed, not gzip", "application/json", b'{"input":"a"}'),
]


def _post_hostile(client: httpx.Client, name: str, content_type: str | None, body: bytes) -> httpx.Response:
    headers = {"content-type": content_type} if content_type else {}
    if name.startswith("gzip"):
        headers["content-encoding"] = "gzip"
    started = time.monotonic()
    r = client.post("/v1/embeddings", content=body, headers=headers, timeout=60)
    assert time.monotonic() - started < 30
    if r.status_code == 200:  # lenient cases (a missing content type, a NUL byte) are real embeddings
        assert all(np.isfinite(d["embedding"]).all() for d in r.json()["data"])
    else:
        assert 400 <= r.status_code < 500
        assert_envelope(r, r.status_code)
    return r


@pytest.mark.parametrize("name,content_type,body", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_bodies(client, name, content_type, body):
    _post_hostile(client, name, content_type, body)


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH"])
def test_wrong_methods(client, method):
    assert_envelope(client.request(method, "/v1/embeddings"), 405)


@pytest.mark.parametrize("path", ["/v1/models/../../etc/passwd", "/v1/models/%00", "/v1/" + "x" * 8000,
                                  "/docs/../../server/app.py"])
def test_hostile_paths(client, path):
    r = client.get(path)
    assert 400 <= r.status_code < 500
    assert_envelope(r, r.status_code)


def test_still_answers_correctly_afterwards(client, fake):
    text = "The server still answers correctly after hostile input."
    r = client.post("/v1/embeddings", json={"input": [text], "encoding_format": "float"})
    np.testing.assert_allclose(r.json()["data"][0]["embedding"], fake.embed([text])[0], atol=1e-6, rtol=0)
    assert client.get("/health").status_code == 200
    metrics = client.get("/metrics").text
    assert not [line for line in metrics.splitlines() if 'status="5' in line]


# ---- the real server process ---------------------------------------------------------------------------


def test_a_100_mb_body_is_refused_by_its_length(server):
    status, body = raw_post(server.port, {"Content-Type": "application/json", "Content-Length": str(100 * 2**20)},
                            b'{"input":"' + b"a" * 65536)
    assert status == 413 and b"request_too_large" in body


def test_real_server_survives_hostile_bodies(server, default_engine):
    with httpx.Client(base_url=server.url) as client:
        for hostile in HOSTILE:
            _post_hostile(client, *hostile)
    text = "The server still answers correctly after hostile input."
    r = httpx.post(server.url + "/v1/embeddings", json={"input": [text], "model": MODEL}, timeout=60)
    assert r.status_code == 200
    np.testing.assert_allclose(r.json()["data"][0]["embedding"], default_engine.embed([text])[0], atol=1e-4)
    assert httpx.get(server.url + "/health", timeout=10).status_code == 200
    metrics = httpx.get(server.url + "/metrics", timeout=10).text
    # /health answers 503 while the model loads; no request route ever answered a 5xx.
    assert not [line for line in metrics.splitlines() if 'status="5' in line and 'route="/health"' not in line]
