"""curl, as a shell user would call it (the plain call itself runs in test_docs_clients)."""

from __future__ import annotations

import json
import subprocess

import pytest
from tests.support.client_support import API_KEYS, MODEL, assert_same_vectors, reference_vectors
from tests.conftest import load_texts

pytestmark = pytest.mark.slow  # curl against a real server process


def curl(url: str, body: dict, *headers: str) -> tuple[int, dict]:
    args = ["curl", "-s", "-w", "\n%{http_code}", url + "/v1/embeddings", "-H", "Content-Type: application/json"]
    for header in headers:
        args += ["-H", header]
    out = subprocess.run([*args, "-d", json.dumps(body)], capture_output=True, text=True, timeout=60,
                         check=True).stdout
    payload, status = out.rsplit("\n", 1)
    return int(status), json.loads(payload)


def test_curl_batch_and_base64(server):
    import base64

    import numpy as np

    texts = load_texts(10)
    status, answer = curl(server.url, {"model": MODEL, "input": texts, "encoding_format": "base64"})
    assert status == 200
    vectors = [np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in answer["data"]]
    assert_same_vectors(vectors, reference_vectors(server.url, texts))


def test_curl_with_api_key(locked_server):
    status, answer = curl(locked_server.url, {"model": MODEL, "input": "hello"}, f"Authorization: Bearer {API_KEYS[1]}")
    assert status == 200
    assert_same_vectors([answer["data"][0]["embedding"]], reference_vectors(locked_server.url, ["hello"], API_KEYS[1]))
    status, answer = curl(locked_server.url, {"model": MODEL, "input": "hello"})
    assert status == 401
    assert answer["error"]["code"] == "invalid_api_key"


def test_curl_error_is_enveloped(server):
    status, answer = curl(server.url, {"model": MODEL, "input": []})
    assert status == 400
    assert set(answer["error"]) == {"message", "type", "param", "code"}
