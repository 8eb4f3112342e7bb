"""OpenAI's wire contract beyond single fields: lengths, caps, aliases, keys, empty inputs.

Served in process on the fake engine (tests/support/fake_engine.py), whose tokenizer is the default
model's: token counts are real, and every vector is checked against the fake's own.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from tokenizers import Tokenizer

from rose_embed.compat.tiktoken_ids import CL100K_SPECIAL_TOKENS, load_cl100k
from rose_embed.engine.contract.config import EngineConfig
from rose_embed.server.cli.main import build_parser, config_from_args
from tests.support.client_support import ALIAS, API_KEYS
from tests.conftest import REPO
from tests.support.fake_engine import FAKE_MODEL, FakeEngine, fake_config, serve
from tests.support.helpers import MODEL

MAX_SEQ_LEN = 256  # the default model's limit, which the fake shares with its tokenizer
AUTH = {"Authorization": f"Bearer {API_KEYS[0]}"}


@pytest.fixture(scope="module")
def aliased(fake):
    """An OpenAI model name given by --model-alias, as an operator may (it is answered anyway)."""
    with serve(fake, fake_config(model_aliases=(ALIAS,))) as client:
        yield client


@pytest.fixture(scope="module")
def model_ids(fake):
    """Token-id input read as the served model's own ids (--token-ids model)."""
    with serve(fake, fake_config(token_ids="model")) as client:
        yield client


@pytest.fixture(scope="module")
def locked(fake):
    """API keys, over-long inputs refused (--long-inputs error), a small request cap."""
    config = fake_config(api_keys=API_KEYS, long_inputs="error", max_request_tokens=2000,
                         engine=EngineConfig(device="cpu", max_batch_tokens=512))
    with serve(fake, config) as client:
        yield client


def embed(client, body: dict, headers: dict | None = None):
    return client.post("/v1/embeddings", json={"model": FAKE_MODEL, **body}, headers=headers or {})


def vectors_of(response) -> np.ndarray:
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    assert [d["index"] for d in data] == list(range(len(data)))
    return np.array([d["embedding"] for d in data], dtype=np.float32)


def assert_vectors(response, expected: np.ndarray) -> None:
    np.testing.assert_allclose(vectors_of(response), expected, atol=1e-6, rtol=0)


def model_tokenizer(fake: FakeEngine) -> Tokenizer:
    tokenizer = Tokenizer.from_file(str(fake.spec.path / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def text_of_tokens(fake: FakeEngine, num_tokens: int) -> str:
    """A text that the default model's tokenizer turns into exactly `num_tokens` tokens, [CLS] and [SEP] included."""
    text = " ".join(["word"] * (num_tokens - 2))
    assert len(model_tokenizer(fake).encode(text).ids) == num_tokens
    return text


# ---- empty inputs and the 2048-input limit -------------------------------------------------------


def test_empty_string_is_embedded(client, fake):
    for texts in ([""], ["", "x"]):
        r = embed(client, {"input": texts if len(texts) > 1 else texts[0], "encoding_format": "float"})
        assert_vectors(r, fake.embed(texts))
        assert abs(np.linalg.norm(vectors_of(r)[0]) - 1) < 1e-6


def test_2048_inputs_accepted_in_order(client, fake):
    texts = [f"input number {i}" for i in range(2048)]
    r = embed(client, {"input": texts, "encoding_format": "float"})
    assert_vectors(r, fake.embed(texts))


# ---- over-long inputs: truncated by default, OpenAI's error with --long-inputs error ------------


def test_long_input_truncated_by_default(client, fake):
    r = embed(client, {"input": text_of_tokens(fake, 600), "encoding_format": "float"})
    assert r.json()["usage"]["prompt_tokens"] == MAX_SEQ_LEN
    # Truncation keeps [CLS] + the first 254 word pieces + [SEP]: the same as the 256-token text.
    assert_vectors(r, fake.embed([text_of_tokens(fake, MAX_SEQ_LEN)]))


def test_long_inputs_error_accepts_exactly_the_limit(locked, fake):
    text = text_of_tokens(fake, MAX_SEQ_LEN)
    assert_vectors(embed(locked, {"input": text, "encoding_format": "float"}, AUTH), fake.embed([text]))


@pytest.mark.parametrize("num_tokens", [MAX_SEQ_LEN + 1, 1000])
def test_long_inputs_error_rejects_longer_text(locked, fake, num_tokens):
    r = embed(locked, {"input": ["short", text_of_tokens(fake, num_tokens)]}, AUTH)
    assert r.status_code == 400
    assert r.json()["error"] == {
        "message": f"This model's maximum context length is {MAX_SEQ_LEN} tokens, however you requested "
        f"{num_tokens} tokens ({num_tokens} in your prompt; 0 for the completion). "
        "Please reduce your prompt; or completion length.",
        "type": "invalid_request_error", "param": None, "code": None,
    }


def test_long_inputs_error_rejects_longer_token_ids(locked, fake):
    """cl100k ids are counted as the text they decode to is, in the served model's tokens."""
    ids = load_cl100k().encode_ordinary(text_of_tokens(fake, MAX_SEQ_LEN + 5))
    assert len(ids) != MAX_SEQ_LEN + 5
    r = embed(locked, {"input": [ids]}, AUTH)
    assert r.status_code == 400
    assert f"however you requested {MAX_SEQ_LEN + 5} tokens" in r.json()["error"]["message"]


def test_long_inputs_error_rejects_longer_model_token_ids(fake):
    with serve(fake, fake_config(token_ids="model", long_inputs="error")) as client:
        r = embed(client, {"input": [[2773] * (MAX_SEQ_LEN + 5)]})
    assert r.status_code == 400
    assert f"however you requested {MAX_SEQ_LEN + 5} tokens" in r.json()["error"]["message"]


# ---- token-id input: cl100k_base's by default, the model's own with --token-ids model -------------------


def test_cl100k_ids_are_read_back_as_text(client, fake):
    texts = ["Hello, world!", "naïve café 🙂", "token ids are read as OpenAI's"]
    cl100k = load_cl100k()
    r = embed(client, {"input": [cl100k.encode_ordinary(t) for t in texts], "encoding_format": "float"})
    assert_vectors(r, fake.embed(texts))
    assert r.json()["usage"]["prompt_tokens"] == sum(map(len, fake.tokenize(texts)))  # the model's tokens
    single = embed(client, {"input": cl100k.encode_ordinary(texts[0]), "encoding_format": "float"})
    assert_vectors(single, fake.embed(texts[:1]))  # one flat list is one input


def test_cl100k_special_tokens_are_read_as_their_text(client, fake):
    ids = load_cl100k().encode("end <|endoftext|>", allowed_special="all")
    assert CL100K_SPECIAL_TOKENS["<|endoftext|>"] in ids
    assert_vectors(embed(client, {"input": [ids], "encoding_format": "float"}), fake.embed(["end <|endoftext|>"]))


@pytest.mark.parametrize("bad", [-1, 100_256, 100_261, 100_277, 10**12])
def test_ids_that_are_no_cl100k_token_name_the_flag(client, bad):
    """Below 100256 every id is a cl100k token; above, only its five special tokens are."""
    r = embed(client, {"input": [[9906, 1917], [9906, bad, 1917]]})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "input" and error["type"] == "invalid_request_error"
    assert f"'input[1]' holds token id {bad}" in error["message"]
    assert "cl100k_base" in error["message"] and "--token-ids model" in error["message"]


def test_model_ids_are_embedded_as_they_are_and_truncated(model_ids, fake):
    ids = fake.tokenize(["token ids go straight to the model"])[0].tolist()
    long_ids = [101] + [2773] * 400 + [102]  # cut as the tokenizer cuts a text: its end token stays last
    r = embed(model_ids, {"input": [ids, ids[:4], long_ids], "encoding_format": "float"})
    cut = long_ids[:MAX_SEQ_LEN - 1] + [102]
    assert_vectors(r, fake.vectors_of([np.array(ids), np.array(ids[:4]), np.array(cut)]))
    assert r.json()["usage"]["prompt_tokens"] == len(ids) + 4 + MAX_SEQ_LEN
    single = embed(model_ids, {"input": ids, "encoding_format": "float"})  # one flat list is one input
    assert_vectors(single, fake.vectors_of([np.array(ids)]))


# ---- --max-request-tokens ----------------------------------------------------------------------------


def test_request_token_cap(locked, fake):
    """`locked` allows 2000 tokens per request; 7 x 256 = 1792 pass, 8 x 256 = 2048 do not."""
    text = text_of_tokens(fake, MAX_SEQ_LEN)
    assert embed(locked, {"input": [text] * 7}, AUTH).status_code == 200
    r = embed(locked, {"input": [text] * 8}, AUTH)
    assert r.status_code == 400
    assert r.json()["error"] == {
        "message": "Requested 2048 tokens, max 2000 tokens per request",
        "type": "max_tokens_per_request", "param": None, "code": "max_tokens_per_request",
    }


# ---- model aliases ---------------------------------------------------------------------------------


def test_aliases_listed_and_accepted(aliased, fake):
    models = aliased.get("/v1/models").json()
    assert [m["id"] for m in models["data"]] == [FAKE_MODEL, ALIAS]
    assert aliased.get(f"/v1/models/{ALIAS}").json()["id"] == ALIAS
    assert aliased.get(f"/models/{FAKE_MODEL}").json()["id"] == FAKE_MODEL
    r = aliased.post("/v1/embeddings", json={"model": ALIAS, "input": "hi", "encoding_format": "float"})
    assert r.json()["model"] == FAKE_MODEL  # the model that served, not the name asked for (server/pipeline/aliases.py)
    assert_vectors(r, fake.embed(["hi"]))
    r = aliased.post("/v1/embeddings", json={"model": "my-other-model", "input": "hi"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    assert f"serves '{FAKE_MODEL}' (also as '{ALIAS}')" in r.json()["error"]["message"]
    assert aliased.get("/v1/models/my-other-model").status_code == 404


@pytest.mark.parametrize("path", ["/v1/embeddings", "/v1/models/my-other-model"])
def test_unknown_model_names_the_served_one_and_the_alias_flag(client, path):
    if path == "/v1/embeddings":
        r = client.post(path, json={"model": "my-other-model", "input": "hi"})
    else:
        r = client.get(path)
    assert r.status_code == 404, r.text
    error = r.json()["error"]
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", "model", "model_not_found")
    assert error["message"] == (
        "The model 'my-other-model' does not exist or you do not have access to it. "
        f"This server serves '{FAKE_MODEL}'; to accept 'my-other-model' as another name for it, "
        "start the server with --model-alias my-other-model."
    )


@pytest.mark.slow  # each case starts `python -m rose_embed serve`
@pytest.mark.parametrize("flags,message", [
    (["--model-alias", "text-embedding-3-small=some/other-model"], "serves"),
    (["--model-alias", "=x"], "ALIAS=MODEL"),
    (["--max-request-tokens", "0"], "--max-request-tokens"),
])
def test_bad_flags_exit_at_start(flags, message):
    proc = subprocess.run([sys.executable, "-m", "rose_embed", "serve", *flags], cwd=REPO, capture_output=True,
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
def test_api_key_rejected(locked, headers):
    for method, path in [("POST", "/v1/embeddings"), ("GET", "/v1/models"), ("GET", f"/v1/models/{FAKE_MODEL}")]:
        r = locked.request(method, path, json={"model": FAKE_MODEL, "input": "x"}, headers=headers)
        assert r.status_code == 401, (path, r.text)
        error = r.json()["error"]
        assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", None, "invalid_api_key")
        assert API_KEYS[0] not in error["message"]  # a key is echoed masked, never whole


def test_api_keys_from_flag_and_environment(fake, monkeypatch):
    """As the CLI builds them: one key by --api-key, one from ROSE_EMBED_API_KEY."""
    monkeypatch.setenv("ROSE_EMBED_API_KEY", API_KEYS[1])
    config = config_from_args(build_parser().parse_args(["serve", "--api-key", API_KEYS[0]]))
    with serve(fake, config) as client:
        for key in API_KEYS:
            r = embed(client, {"input": "x", "encoding_format": "float"}, {"Authorization": f"Bearer {key}"})
            assert_vectors(r, fake.embed(["x"]))
        assert embed(client, {"input": "x"}).status_code == 401


def test_health_metrics_and_docs_stay_open(locked):
    assert locked.get("/health").status_code == 200
    assert locked.get("/metrics").status_code == 200
    assert locked.get("/docs/openapi.json").status_code == 200


def test_server_without_keys_ignores_the_header(client):
    assert embed(client, {"input": "x"}, {"Authorization": "Bearer anything-at-all"}).status_code == 200


# ---- every error: OpenAI's status, type, param and code; never a 5xx -----------------------------------


ERRORS = [
    # (client fixture, headers, body, status, type, param, code)
    ("client", {}, {"input": []}, 400, "invalid_request_error", "input", None),
    ("client", {}, {"input": ["a"] * 2049}, 400, "invalid_request_error", "input", None),
    ("model_ids", {}, {"input": [[100, 50_000]]}, 400, "invalid_request_error", "input", None),
    ("client", {}, {"input": [[100, 200_000]]}, 400, "invalid_request_error", "input", None),
    ("client", {}, {"input": [[100, 100_261]]}, 400, "invalid_request_error", "input", None),
    ("client", {}, {"input": "a", "dimensions": 0}, 400, "invalid_request_error", "dimensions", None),
    ("client", {}, {"input": "a", "model": "my-other-model"}, 404, "invalid_request_error", "model", "model_not_found"),
    ("client", {}, {"input": "a", "model": MODEL}, 404, "invalid_request_error", "model", "model_not_found"),
    ("locked", {}, {"input": "a"}, 401, "invalid_request_error", None, "invalid_api_key"),
    ("locked", AUTH, {"input": "word " * 300}, 400, "invalid_request_error", None, None),
    ("locked", AUTH, {"input": ["word " * 250] * 8}, 400, "max_tokens_per_request", None,
     "max_tokens_per_request"),
]


@pytest.mark.parametrize("fixture,headers,body,status,type_,param,code", ERRORS)
def test_error_table(request, fixture, headers, body, status, type_, param, code):
    client = request.getfixturevalue(fixture)
    r = client.post("/v1/embeddings", json={"model": FAKE_MODEL, **body}, headers=headers)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert (error["type"], error["param"], error["code"]) == (type_, param, code)
    assert error["message"]


def test_out_of_vocabulary_ids_say_what_to_do(model_ids):
    message = embed(model_ids, {"input": [[9906, 1917, 50_000]]}).json()["error"]["message"]
    assert "--token-ids cl100k" in message and "check_embedding_ctx_length=False" in message
