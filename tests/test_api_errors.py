"""Every malformed request gets a 4xx in OpenAI's envelope with the right `param`."""

from __future__ import annotations

import httpx
import pytest

MODEL = "sentence-transformers/all-MiniLM-L6-v2"

CASES = [
    # (name, body as raw bytes or JSON value, status, param, code)
    ("malformed json", b'{"input": "a", ', 400, None, None),
    ("not an object", [1, 2], 400, None, None),
    ("missing input", {"model": MODEL}, 400, "input", None),
    ("input wrong type", {"input": 5, "model": MODEL}, 400, "input", None),
    ("input null", {"input": None, "model": MODEL}, 400, "input", None),
    ("empty list", {"input": [], "model": MODEL}, 400, "input", None),
    ("too many inputs", {"input": ["a"] * 2049, "model": MODEL}, 400, "input", None),
    ("mixed list", {"input": ["a", 1], "model": MODEL}, 400, "input", None),
    ("bool token", {"input": [True, 2], "model": MODEL}, 400, "input", None),
    ("empty token list", {"input": [[]], "model": MODEL}, 400, "input", None),
    ("token out of range", {"input": [101, 999_999], "model": MODEL}, 400, "input", None),
    ("negative token", {"input": [[101, -1]], "model": MODEL}, 400, "input", None),
    ("bad encoding_format", {"input": "a", "model": MODEL, "encoding_format": "hex"}, 400, "encoding_format", None),
    ("encoding_format wrong type", {"input": "a", "model": MODEL, "encoding_format": 3}, 400, "encoding_format", None),
    ("dimensions too large", {"input": "a", "model": MODEL, "dimensions": 385}, 400, "dimensions", None),
    ("dimensions zero", {"input": "a", "model": MODEL, "dimensions": 0}, 400, "dimensions", None),
    ("dimensions wrong type", {"input": "a", "model": MODEL, "dimensions": "8"}, 400, "dimensions", None),
    ("unknown model", {"input": "a", "model": "text-embedding-nope"}, 404, "model", "model_not_found"),
]


@pytest.mark.parametrize("name,body,status,param,code", CASES, ids=[c[0] for c in CASES])
def test_error_envelope(server, name, body, status, param, code):
    kwargs = {"content": body} if isinstance(body, bytes) else {"json": body}
    r = httpx.post(server.url + "/v1/embeddings", headers={"content-type": "application/json"}, timeout=30, **kwargs)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    assert error["message"]
    assert error["param"] == param
    assert error["code"] == code


def test_unknown_route_is_enveloped_404(server):
    r = httpx.get(server.url + "/v1/nothing-here", timeout=10)
    assert r.status_code == 404
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_unknown_fields_and_user_are_ignored(server):
    r = httpx.post(server.url + "/v1/embeddings", timeout=30,
                   json={"input": "hi", "model": MODEL, "user": "u-1", "something_new": {"x": 1}})
    assert r.status_code == 200, r.text
    assert len(r.json()["data"][0]["embedding"]) == 384


def test_server_still_answers_after_errors(server):
    for _, body, *_ in CASES:
        kwargs = {"content": body} if isinstance(body, bytes) else {"json": body}
        httpx.post(server.url + "/v1/embeddings", headers={"content-type": "application/json"}, timeout=30, **kwargs)
    r = httpx.post(server.url + "/embeddings", json={"input": ["still", "fine"], "model": MODEL}, timeout=30)
    assert r.status_code == 200
    assert [d["index"] for d in r.json()["data"]] == [0, 1]
