"""Every malformed request gets a 4xx in OpenAI's envelope with the right `param` (fake engine, in process)."""

from __future__ import annotations

import asyncio
import time

import msgspec
import numpy as np
import pytest

from tests.support.fake_engine import FAKE_MODEL, FakeEngine, serve_async
from tests.support.helpers import assert_envelope, longest_loop_stall

DIM = 64

CASES = [
    # (name, body as raw bytes or JSON value, status, param, code)
    ("malformed json", b'{"input": "a", ', 400, None, None),
    ("not an object", [1, 2], 400, None, None),
    ("missing input", {"model": FAKE_MODEL}, 400, "input", None),
    ("input wrong type", {"input": 5, "model": FAKE_MODEL}, 400, "input", None),
    ("input null", {"input": None, "model": FAKE_MODEL}, 400, "input", None),
    ("empty list", {"input": [], "model": FAKE_MODEL}, 400, "input", None),
    ("too many inputs", {"input": ["a"] * 2049, "model": FAKE_MODEL}, 400, "input", None),
    ("mixed list", {"input": ["a", 1], "model": FAKE_MODEL}, 400, "input", None),
    ("bool token", {"input": [True, 2], "model": FAKE_MODEL}, 400, "input", None),
    ("empty token list", {"input": [[]], "model": FAKE_MODEL}, 400, "input", None),
    ("token out of range", {"input": [101, 999_999], "model": FAKE_MODEL}, 400, "input", None),
    ("negative token", {"input": [[101, -1]], "model": FAKE_MODEL}, 400, "input", None),
    ("bad encoding_format", {"input": "a", "model": FAKE_MODEL, "encoding_format": "hex"}, 400, "encoding_format",
     None),
    ("int8 from a float-only model", {"input": "a", "encoding_format": "int8"}, 400, "encoding_format", None),
    ("encoding_format wrong type", {"input": "a", "model": FAKE_MODEL, "encoding_format": 3}, 400, "encoding_format",
     None),
    ("dimensions too large", {"input": "a", "model": FAKE_MODEL, "dimensions": DIM + 1}, 400, "dimensions", None),
    ("dimensions zero", {"input": "a", "model": FAKE_MODEL, "dimensions": 0}, 400, "dimensions", None),
    ("dimensions wrong type", {"input": "a", "model": FAKE_MODEL, "dimensions": "8"}, 400, "dimensions", None),
    ("unknown prompt_name", {"input": "a", "prompt_name": "query"}, 400, "prompt_name", None),
    ("unknown model", {"input": "a", "model": "text-embedding-nope"}, 404, "model", "model_not_found"),
]


@pytest.fixture(scope="module")
def fake() -> FakeEngine:
    return FakeEngine(dim=DIM)


def _post(client, body):
    kwargs = {"content": body} if isinstance(body, bytes) else {"json": body}
    return client.post("/v1/embeddings", headers={"content-type": "application/json"}, **kwargs)


@pytest.mark.parametrize("name,body,status,param,code", CASES, ids=[c[0] for c in CASES])
def test_error_envelope(client, name, body, status, param, code):
    error = assert_envelope(_post(client, body), status)
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert error["code"] == code


def test_unknown_route_is_enveloped_404(client):
    error = assert_envelope(client.get("/v1/nothing-here"), 404, "not_found")
    assert error["type"] == "invalid_request_error"


def test_unknown_fields_and_user_are_ignored(client, fake):
    r = client.post("/v1/embeddings", json={"input": "hi", "model": FAKE_MODEL, "user": "u-1",
                                            "something_new": {"x": 1}, "encoding_format": "float"})
    assert r.status_code == 200, r.text
    np.testing.assert_allclose(r.json()["data"][0]["embedding"], fake.embed(["hi"])[0], atol=1e-6, rtol=0)


def test_a_flat_token_array_longer_than_the_input_cap_is_one_input(client, fake):
    """OpenAI takes up to 8,191 ids in one input: the cap on inputs counts inputs, not ids."""
    ids = [101 + i % 50 for i in range(3000)]
    r = client.post("/v1/embeddings", json={"input": ids, "model": FAKE_MODEL, "encoding_format": "float"})
    assert r.status_code == 200, r.text
    assert len(r.json()["data"]) == 1
    nested = client.post("/v1/embeddings", json={"input": [ids], "model": FAKE_MODEL, "encoding_format": "float"})
    assert r.json()["data"][0]["embedding"] == nested.json()["data"][0]["embedding"]


def test_server_still_answers_after_errors(client, fake):
    for _, body, *_ in CASES:
        _post(client, body)
    r = client.post("/embeddings", json={"input": ["still", "fine"], "model": FAKE_MODEL, "encoding_format": "float"})
    assert r.status_code == 200
    data = r.json()["data"]
    assert [d["index"] for d in data] == [0, 1]
    np.testing.assert_allclose([d["embedding"] for d in data], fake.embed(["still", "fine"]), atol=1e-6, rtol=0)


@pytest.mark.parametrize("body,where,escape", [
    (b'{"input": "\\ud800 x"}', "'input'", "\\ud800"),  # msgspec alone: "Input data was truncated"
    (b'{"input": "\\udc00"}', "'input'", "\\udc00"),  # msgspec alone: "invalid utf-16 surrogate pair"
    (b'{"input": ["fine", "\\ud83d!"]}', "'input[1]'", "\\ud83d"),
    (b'{"input": "a", "model": "\\udfff"}', "'model'", "\\udfff"),
], ids=["high", "low", "in a list", "in model"])
def test_an_unpaired_surrogate_escape_is_named_as_such(client, body, where, escape):
    error = assert_envelope(_post(client, body), 400)
    assert error["message"] == f"{where} holds an unpaired UTF-16 surrogate ({escape}); text must be valid Unicode"
    assert error["param"] == where.strip("'").split("[")[0]


def test_a_surrogate_pair_escape_is_one_character(client, fake):
    r = _post(client, b'{"input": "smile \\ud83d\\ude00", "encoding_format": "float"}')
    assert r.status_code == 200, r.text
    np.testing.assert_allclose(r.json()["data"][0]["embedding"], fake.embed(["smile \U0001F600"])[0], atol=1e-6, rtol=0)


def test_a_utf8_byte_order_mark_before_the_body_is_ignored(client, fake):
    """As Windows tools write one (msgspec alone: "invalid character (byte 0)")."""
    r = _post(client, b'\xef\xbb\xbf{"input": "hi", "encoding_format": "float"}')
    assert r.status_code == 200, r.text
    np.testing.assert_allclose(r.json()["data"][0]["embedding"], fake.embed(["hi"])[0], atol=1e-6, rtol=0)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-32"])
def test_a_body_in_another_unicode_encoding_is_named(client, encoding):
    error = assert_envelope(_post(client, '{"input": "hi"}'.encode(encoding)), 400)
    assert error["message"].startswith(f"The body is {encoding.upper()} text")


def test_token_ids_that_decode_past_the_character_cap_are_counted_in_ids(client):
    """cl100k ids are decoded to text before the cap on characters: the answer counts the ids
    the client sent, and says that they decode to too much text."""
    spaces = 58040  # cl100k_base's longest token: 128 spaces
    error = assert_envelope(_post(client, {"input": [[101, 102], [spaces] * 1600]}), 400, "input_too_long")
    assert error["param"] == "input"
    assert error["message"].startswith("'input[1]' holds 1600 token ids, which decode to 204800 characters of text; "
                                       "at most 200000 characters are allowed per input"), error["message"]
    assert "send fewer ids per input" in error["message"]


def test_an_input_of_more_ids_than_could_decode_within_the_cap_is_refused_before_decoding(client, monkeypatch):
    from rose_embed.server.pipeline.token_inputs import TokenInputs

    def no_decoding(self, token_ids):
        raise AssertionError("decoded")

    monkeypatch.setattr(TokenInputs, "_check_and_decode", no_decoding)
    error = assert_envelope(_post(client, {"input": [[101, 102], [1] * 1_000_000]}), 400, "input_too_long")
    assert error["param"] == "input"
    assert error["message"].startswith("'input[1]' holds 1000000 token ids, more than 800000 (4 per character of "
                                       "--max-input-chars 200000)"), error["message"]


def test_an_empty_model_name_is_a_400_that_says_so(client):
    """OpenAI answers `model: ""` with a 400 'you must provide a model parameter'; a 404 would
    advise `--model-alias ''`."""
    error = assert_envelope(_post(client, {"input": "a", "model": ""}), 400)
    assert error["type"] == "invalid_request_error" and error["param"] == "model"
    assert error["message"].startswith("you must provide a model parameter: 'model' is empty")
    assert f"'{FAKE_MODEL}'" in error["message"] and "--model-alias" not in error["message"]


def test_millions_of_token_ids_hold_the_event_loop_no_longer_than_parsing_them(fake):
    """A body of millions of ids (within --max-body-bytes) is refused, and checking the ids' types
    and range must not stop every other request of the front end meanwhile: the loop may stall
    about as long as parsing the JSON takes, not for a check in Python of each id."""
    body = b'{"input":[' + b"1," * 4_000_000 + b"1]}"
    parse = min(_seconds(lambda: msgspec.json.decode(body)) for _ in range(3))

    async def post_while_ticking():
        async with serve_async(fake) as client:
            return await longest_loop_stall(lambda: client.post(
                "/v1/embeddings", content=body, headers={"content-type": "application/json"}), 0.005)

    # The best of up to four tries: under pytest -n another worker, or another process, can take
    # the core meanwhile; a check per id in Python would stall every try.
    stalls = []
    for _ in range(4):
        response, stall = asyncio.run(post_while_ticking())
        assert assert_envelope(response, 400, "input_too_long")["param"] == "input"
        stalls.append(stall)
        if stall < 6 * parse:
            break
    longest_stall = min(stalls)
    # Parsing and the type check in C stay on the loop, a few parses' time; a check per id in
    # Python held it many times longer.
    assert longest_stall < 6 * parse, (longest_stall, parse)


def _seconds(work) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started
