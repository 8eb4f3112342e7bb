"""The ASCII WordPiece fast path gives exactly the Rust tokenizer's ids, or steps aside."""

from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from rose_embed.engine.model_files.loader import resolve_model_dir
from rose_embed.engine.text.tokenizer import TextTokenizer
from tests.conftest import load_texts

MINILM = resolve_model_dir(None)[0]


def _reference(tokenizer: TextTokenizer, texts: list[str]) -> list[list[int]]:
    """What the Rust tokenizer alone gives, configured as TextTokenizer configures it."""
    rust = tokenizer._tokenizer
    stripped = [t.strip() for t in texts] if tokenizer.strip_texts else texts
    return [e.ids for e in rust.encode_batch(stripped, add_special_tokens=True)]


def _ours(tokenizer: TextTokenizer, texts: list[str]) -> list[list[int]]:
    return [ids.tolist() for ids in tokenizer.encode(texts)]


def _tokenizer_dir(tmp_path: Path, edit) -> Path:
    """The default model's tokenizer files with tokenizer.json edited."""
    out = tmp_path / "tok"
    out.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(MINILM / name, out / name)
    config = json.loads((out / "tokenizer.json").read_text())
    edit(config)
    (out / "tokenizer.json").write_text(json.dumps(config))
    return out


@pytest.fixture(scope="module")
def minilm() -> TextTokenizer:
    tokenizer = TextTokenizer(MINILM, 256, strip_texts=True)
    assert tokenizer._fast is not None, "the default model's tokenizer must take the fast path"
    return tokenizer


@pytest.mark.parametrize("max_len", [256, 16, 3])
def test_workload_ids_equal_the_rust_tokenizer(max_len):
    tokenizer = TextTokenizer(MINILM, max_len, strip_texts=True)
    paragraphs = load_texts(3000)
    documents = ["\n\n".join(paragraphs[i:i + 8]) for i in range(0, len(paragraphs), 8)]
    for texts in (paragraphs, documents):
        assert _ours(tokenizer, texts) == _reference(tokenizer, texts)
    # Most of the workload is ASCII, so the comparison above is of the fast path, not of Rust with itself.
    fast = sum(tokenizer._fast.encode(t.strip()) is not None for t in paragraphs)
    assert fast > 0.9 * len(paragraphs)


EDGE_CASES = [
    "", "   ", "a", "Hello, World!", "[MASK] is a special token", "[mask] lowercased", "x[CLS]y", "[SEP",
    "tab\there\nnewline\r\nreturn", "form\x0cfeed", "bell\x07", "del\x7f", "nul\x00byte", "vertical\x0btab",
    "caf\u00e9", "naïve", "日本語", "emoji 🙂", "a" * 150, "b" * 100, "c" * 101, "##ing", "don't", "e-mail",
    "snake_case_name", "x=1;y=2", "a\u00a0b", "\x1c\x1d\x1e\x1f", "UPPER lower MiXeD 123abc",
]


def test_edge_cases(minilm):
    assert _ours(minilm, EDGE_CASES) == _reference(minilm, EDGE_CASES)


_ASCII = st.characters(min_codepoint=0, max_codepoint=127)
_PIECES = st.sampled_from(["[MASK]", "[CLS]", "[unk]", "##", "x" * 120, "\u00e9", "  ", "\n", "ß", "İ"])
_TEXTS = st.lists(st.one_of(st.text(_ASCII, max_size=40), _PIECES), max_size=8).map("".join)


_SHORT_LISTS = st.lists(_TEXTS, min_size=1, max_size=6)


@settings(max_examples=100, deadline=None)
@given(_SHORT_LISTS)
def test_random_texts(minilm, texts):
    assert _ours(minilm, texts) == _reference(minilm, texts)


@pytest.mark.slow  # the same check on four times the examples
@settings(max_examples=400, deadline=None)
@given(_SHORT_LISTS)
def test_many_random_texts(minilm, texts):
    assert _ours(minilm, texts) == _reference(minilm, texts)


@functools.cache
def _minilm_of_length(max_len: int) -> TextTokenizer:
    return TextTokenizer(MINILM, max_len, strip_texts=True)


def _assert_the_whole_list_path_agrees(texts: list[str], max_len: int) -> None:
    """Sixteen texts and more go through the fast path's whole-list form, with the texts off it
    (non-ASCII, control characters, added tokens) mixed in among the rest."""
    tokenizer = _minilm_of_length(max_len)
    assert _ours(tokenizer, texts) == _reference(tokenizer, texts)
    nonempty = [t for t in texts if t.strip()]
    if len(nonempty) >= 16:
        assert tokenizer.encode_packed(nonempty).input_ids.tolist() == \
            [i for ids in _reference(tokenizer, nonempty) for i in ids]


_LISTS = (st.lists(_TEXTS, min_size=16, max_size=48), st.sampled_from([256, 8, 3]))


@settings(max_examples=30, deadline=None)
@given(*_LISTS)
def test_random_lists_take_the_whole_list_path(texts, max_len):
    _assert_the_whole_list_path_agrees(texts, max_len)


@pytest.mark.slow  # the same check on five times the examples
@settings(max_examples=150, deadline=None)
@given(*_LISTS)
def test_many_random_lists_take_the_whole_list_path(texts, max_len):
    _assert_the_whole_list_path_agrees(texts, max_len)


def test_whole_list_path_with_an_added_token_across_lines(tmp_path):
    """An added token holding a newline could match across two joined texts: texts are then
    checked one by one."""
    def add_token(config):
        config["added_tokens"].append({"id": 5, "content": "x\ny", "single_word": False, "lstrip": False,
                                       "rstrip": False, "normalized": False, "special": True})
    tokenizer = TextTokenizer(_tokenizer_dir(tmp_path, add_token), 64, strip_texts=True)
    assert tokenizer._fast is not None and tokenizer._fast._added_spans_lines
    texts = ["ends in x", "y starts", "has x\ny inside", "[MASK] here"] * 5 + load_texts(40)
    assert _ours(tokenizer, texts) == _reference(tokenizer, texts)


def test_cased_tokenizer(tmp_path):
    def cased(config):
        config["normalizer"]["lowercase"] = False
    directory = _tokenizer_dir(tmp_path, cased)
    tokenizer = TextTokenizer(directory, 64, strip_texts=True)
    assert tokenizer._fast is not None
    texts = EDGE_CASES + load_texts(500)
    assert _ours(tokenizer, texts) == _reference(tokenizer, texts)
    # sentence-transformers' do_lower_case on a cased tokenizer: a Lowercase step before the BERT normaliser.
    lowered = TextTokenizer(directory, 64, strip_texts=True, lowercase=True)
    assert lowered._fast is not None
    assert _ours(lowered, texts) == _reference(lowered, texts)
    assert _ours(lowered, ["ABC"]) != _ours(tokenizer, ["ABC"])


def test_other_pipelines_take_the_rust_tokenizer(tmp_path):
    def whitespace_split(config):
        config["pre_tokenizer"] = {"type": "WhitespaceSplit"}
    tokenizer = TextTokenizer(_tokenizer_dir(tmp_path, whitespace_split), 64, strip_texts=True)
    assert tokenizer._fast is None
    texts = EDGE_CASES + load_texts(200)
    assert _ours(tokenizer, texts) == _reference(tokenizer, texts)


def test_packed_equals_per_text(minilm):
    texts = load_texts(300) + EDGE_CASES
    texts = [t for t in texts if t.strip()]
    packed = minilm.encode_packed(texts)
    flat = [i for ids in _reference(minilm, texts) for i in ids]
    assert packed.input_ids.tolist() == flat


def test_a_fresh_rust_tokenizer_agrees(minilm):
    """The reference above is TextTokenizer's own Rust tokenizer; one loaded afresh agrees with it."""
    rust = Tokenizer.from_file(str(MINILM / "tokenizer.json"))
    rust.no_padding()
    rust.enable_truncation(max_length=256)
    texts = load_texts(200)
    assert _ours(minilm, texts) == [e.ids for e in rust.encode_batch([t.strip() for t in texts])]
