"""Unit tests of the wire-contract helpers: cl100k decoding, aliases, API keys."""

from __future__ import annotations

import pytest
import tiktoken

from compat.tiktoken_ids import CL100K_SPECIAL_TOKENS, TiktokenDecoder, load_cl100k
from server.aliases import AliasError, model_names, parse_alias, resolve_aliases
from server.auth import _mask, is_valid_key, keys_from_env

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
    assert model_names("served", ("a", "b=served", "a")) == ["served", "a", "b"]


def test_api_keys():
    keys = ("sk-one", "sk-two")
    assert is_valid_key("sk-two", keys) and is_valid_key("sk-one", keys)
    for wrong in ["", "sk-on", "sk-one ", "sk-onex", "SK-ONE"]:
        assert not is_valid_key(wrong, keys)
    assert keys_from_env({"ROSE_EMBED_API_KEY": " a, b ,,c "}) == ["a", "b", "c"]
    assert keys_from_env({}) == []
    assert "secretpart" not in _mask("sk-secretpart-1234")
