"""Unit tests of the wire-contract helpers: cl100k decoding, token-id modes, aliases, API keys."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest
import tiktoken

from rose_embed.compat.inputs import NormalisedInput
from rose_embed.compat.tiktoken_ids import CL100K_SPECIAL_TOKENS, TiktokenDecoder, load_cl100k
from rose_embed.server.cli.main import build_parser, config_from_args
from rose_embed.server.config import ServerConfig
from rose_embed.server.http.errors import APIError
from rose_embed.server.pipeline.token_inputs import TokenInputs
from tests.conftest import REPO
from rose_embed.server.pipeline.aliases import AliasError, model_names, parse_alias, resolve_aliases
from rose_embed.server.cli.api_keys import keys_from_env
from rose_embed.server.http.auth import _mask, is_valid_key

SAMPLES = [
    "Hello, world!", "", "  leading and trailing  ", "line one\nline two\r\n\ttab", "naïve café — ünïcödé",
    "数学 and emoji 🙂👍🏽", "It's we'll they've I'D", "1234567890 3.14159", "<|endoftext|> as plain text",
]


@pytest.fixture(scope="module")
def decoder() -> TiktokenDecoder:
    return TiktokenDecoder()


def test_offline_cl100k_equals_tiktokens_own(tiktoken_offline):
    """Built from bpe-openai's file, the encoding tokenizes exactly as tiktoken's registered cl100k_base."""
    ours, theirs = load_cl100k(), tiktoken.get_encoding("cl100k_base")
    assert ours.n_vocab == theirs.n_vocab == 100277
    assert ours._special_tokens == theirs._special_tokens == CL100K_SPECIAL_TOKENS
    for text in SAMPLES:
        assert ours.encode_ordinary(text) == theirs.encode_ordinary(text)
        assert ours.encode(text, allowed_special="all") == theirs.encode(text, allowed_special="all")


def test_decode_round_trips(decoder, tiktoken_offline):
    theirs = tiktoken.get_encoding("cl100k_base")
    ids = [theirs.encode_ordinary(t) for t in SAMPLES if t]
    assert decoder.decode(ids) == [t for t in SAMPLES if t]


def test_decode_of_a_cut_character_keeps_the_rest(decoder, tiktoken_offline):
    """LangChain cuts long texts every 8191 ids, possibly inside a character: no failure, the rest kept."""
    ids = tiktoken.get_encoding("cl100k_base").encode_ordinary("ab🙂cd")
    partial = [i for i in ids if "\N{REPLACEMENT CHARACTER}" in decoder.decode([[i]])[0]]
    assert partial, "the emoji should span several byte-level tokens"
    text = decoder.decode([[i for i in ids if i != partial[0]]])[0]
    assert "\N{REPLACEMENT CHARACTER}" in text and text.startswith("ab") and text.endswith("cd")


def test_invalid_cl100k_ids_are_found(decoder):
    """Ids past the byte-pair ranks decode only where they are special tokens; tiktoken raises on the rest."""
    assert decoder.first_invalid_id([0, 100_255, *CL100K_SPECIAL_TOKENS.values()]) is None
    assert decoder.first_invalid_id([5, 100_256, 7]) == 100_256
    assert decoder.first_invalid_id([5, 100_257, 100_275]) == 100_275
    assert decoder.first_invalid_id([5, -3]) == -3
    assert decoder.first_invalid_id([100_277]) == 100_277
    with pytest.raises(KeyError):
        decoder.decode([[100_256]])


def test_cl100k_loads_offline_without_importing_bpe_openais_library():
    """The file is read from bpe-openai's package folder; its 70 MB native library stays unloaded."""
    code = ("import sys; from rose_embed.compat.tiktoken_ids import TiktokenDecoder; TiktokenDecoder(); "
            "assert 'bpe_openai' not in sys.modules, sorted(m for m in sys.modules if 'bpe' in m)")
    env = {**os.environ, "TIKTOKEN_CACHE_DIR": "/nonexistent", "HF_HUB_OFFLINE": "1"}
    subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, check=True, timeout=60)


def test_token_ids_flag():
    assert config_from_args(build_parser().parse_args(["serve"])).token_ids == "cl100k"
    assert config_from_args(build_parser().parse_args(["serve", "--token-ids", "model"])).token_ids == "model"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--tiktoken-ids"])


def test_model_mode_keeps_ids_and_checks_their_range():
    model_ids = TokenInputs(ServerConfig(token_ids="model"))
    assert model_ids.decoder is None
    inputs = NormalisedInput(token_ids=[[101, 102]])
    assert asyncio.run(model_ids.decode_token_ids(inputs)) is inputs
    with pytest.raises(APIError, match="--token-ids cl100k") as info:
        model_ids.check_token_ids([[101, 30522]], vocab_size=30522)
    assert (info.value.status, info.value.param) == (400, "input")
    model_ids.check_token_ids([[101, 30521]], vocab_size=30522)


def test_cl100k_mode_decodes_ids_to_text():
    inputs = NormalisedInput(token_ids=[load_cl100k().encode_ordinary(t) for t in SAMPLES if t])
    decoded = asyncio.run(TokenInputs(ServerConfig()).decode_token_ids(inputs))
    assert decoded.token_ids is None and decoded.texts == [t for t in SAMPLES if t]


@pytest.mark.parametrize("value,expected", [
    ("text-embedding-3-small", ("text-embedding-3-small", None)),
    ("ada=org/model", ("ada", "org/model")),
    (" ada = org/model ", ("ada", "org/model")),
])
def test_parse_alias(value, expected):
    assert parse_alias(value) == expected


@pytest.mark.parametrize("value", ["", "=x", "x="])
def test_parse_alias_rejects(value):
    with pytest.raises(AliasError):
        parse_alias(value)


def test_resolve_aliases_checks_targets():
    assert resolve_aliases(("a", "b=served", "a", "served"), "served") == ("a", "b")
    with pytest.raises(AliasError, match="serves 'served'"):
        resolve_aliases(("a=other",), "served")
    assert model_names("served", ("a", "b=served", "a")).listed() == ["served", "a", "b"]


def test_resolve_aliases_refuses_an_alias_of_two_models_or_a_served_name():
    assert resolve_aliases(("x=a", "x=a", "x"), "a", ("b",)) == ("x",)  # one model, named thrice
    with pytest.raises(AliasError, match=r"^--model-alias 'x=b': 'x' already names 'a'; an alias names one model$"):
        resolve_aliases(("x=a", "x=b"), "a", ("b",))
    with pytest.raises(AliasError, match=r"^--model-alias 'x': 'x' already names 'b'"):
        resolve_aliases(("x=b", "x"), "a", ("b",))
    for value in ("b=a", "b", "a=b"):
        with pytest.raises(AliasError, match=r"is a served model's own name$"):
            resolve_aliases((value,), "a", ("b",))
    assert resolve_aliases(("a", "b=b"), "a", ("b",)) == ()  # a model's own name for itself: nothing to add


def test_api_keys():
    keys = ("sk-one", "sk-two")
    assert is_valid_key("sk-two", keys) and is_valid_key("sk-one", keys)
    for wrong in ["", "sk-on", "sk-one ", "sk-onex", "SK-ONE"]:
        assert not is_valid_key(wrong, keys)
    assert keys_from_env({"ROSE_EMBED_API_KEY": " a, b ,,c "}) == ["a", "b", "c"]
    assert keys_from_env({}) == []
    assert "secretpart" not in _mask("sk-secretpart-1234")
