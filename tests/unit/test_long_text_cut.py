"""Texts far past the model's limit are cut before they are tokenized (engine/text/long_text_cut.py),
and the ids the model reads are exactly those the tokenizer's own truncation gives for the whole text."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from bench.lib.common import load_texts
from rose_embed.engine.text.long_text_cut import CUT_CHARS_PER_TOKEN, cut_point, splits_at_whitespace
from rose_embed.engine.text.tokenizer import TextTokenizer
from tests.support.st_checkpoints import bert_tokenizer, qwen_tokenizer, roberta_tokenizer, xlmr_tokenizer

MAX_SEQ_LEN = 32
LAYOUTS = {"bert": bert_tokenizer, "roberta": roberta_tokenizer, "xlmr": xlmr_tokenizer, "qwen": qwen_tokenizer}
WORDS = " ".join(load_texts(200)).split()
SPACES = [" ", " ", " ", "  ", "\n", "\t", " \n\n ", "\u3000"]
ODD = ["é", "中文", "...", "(x)", "🙂", "a" * 120, "-" * 30]


@pytest.fixture(scope="module", params=sorted(LAYOUTS))
def tokenizers(request, tmp_path_factory) -> tuple[TextTokenizer, Tokenizer]:
    """Ours at MAX_SEQ_LEN, and the reference: the tokenizer file as it is, truncating there."""
    folder: Path = tmp_path_factory.mktemp(request.param)
    LAYOUTS[request.param](folder)
    reference = Tokenizer.from_file(str(folder / "tokenizer.json"))
    reference.enable_truncation(max_length=MAX_SEQ_LEN)
    reference.no_padding()
    return TextTokenizer(folder, MAX_SEQ_LEN), reference


def long_text(rng: random.Random, num_words: int) -> str:
    parts = []
    for _ in range(num_words):
        parts.append(rng.choice(ODD) if rng.random() < 0.1 else rng.choice(WORDS))
        parts.append(rng.choice(SPACES))
    return "".join(parts)


def test_every_tokenizer_layout_of_the_tests_splits_at_whitespace(tokenizers):
    ours, reference = tokenizers
    assert splits_at_whitespace(reference.to_str())
    assert ours._cut_chars == CUT_CHARS_PER_TOKEN * MAX_SEQ_LEN


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), num_words=st.integers(40, 400))
def test_a_cut_text_gives_the_ids_the_whole_text_gives(tokenizers, seed, num_words):
    ours, reference = tokenizers
    rng = random.Random(seed)
    texts = [long_text(rng, num_words) for _ in range(3)] + ["a short one"]
    want = [e.ids for e in reference.encode_batch([t.strip() for t in texts])]
    assert [list(ids) for ids in ours.encode(texts)] == want
    flat, lengths = ours.encode_flat(texts)
    assert flat.tolist() == [i for ids in want for i in ids] and lengths.tolist() == [len(ids) for ids in want]


def test_a_text_of_few_long_words_is_tokenized_whole_when_its_cut_would_not_reach_the_limit(tokenizers):
    ours, reference = tokenizers
    text = " ".join(["x" * 150] * 60)  # BERT reads each word as one [UNK]: the cut holds too few tokens
    assert [list(ids) for ids in ours.encode([text])] == [reference.encode(text).ids]


@pytest.mark.parametrize("separator", ["\x1c", "\x1d", "\x1e", "\x1f", "\x85", "\xa0", "\u2028", "\t", "\n"])
def test_a_text_is_cut_at_spaces_only_not_where_a_normaliser_may_join_the_words(tokenizers, separator):
    """Python counts these as whitespace; BERT's normaliser deletes the control characters among
    them, joining the words on either side, and Metaspace splits at spaces alone."""
    ours, reference = tokenizers
    text = separator.join(["00", "0" * 60] * (MAX_SEQ_LEN * CUT_CHARS_PER_TOKEN // 30 + 2))
    assert [list(ids) for ids in ours.encode([text])] == [reference.encode(text).ids]
    assert cut_point("00" + separator + "0" * 40, 10) is None


def test_a_text_without_whitespace_is_not_cut():
    assert cut_point("y" * 5000, 256) is None
    assert cut_point("ab cd" + "e" * 5000, 256) == 2
    assert cut_point("ab  cd ef", 4) == 2  # before the first of the spaces that follow "ab"


def test_a_200_000_character_text_costs_what_its_first_few_thousand_characters_cost(default_spec_tokenizer):
    tokenizer = default_spec_tokenizer
    seen = []
    ids_of = tokenizer._ids

    def spy(texts):
        seen.extend(len(t) for t in texts)
        return ids_of(texts)

    tokenizer._ids = spy
    text = long_text(random.Random(0), 40_000)[:200_000]
    assert len(text) == 200_000
    ids = tokenizer.encode([text])[0]
    assert len(ids) == tokenizer.max_seq_len
    assert max(seen) <= CUT_CHARS_PER_TOKEN * tokenizer.max_seq_len  # the tokenizer never read the rest


@pytest.fixture
def default_spec_tokenizer() -> TextTokenizer:
    from rose_embed.engine.model_files.loader import load_spec
    from rose_embed.engine.text.tokenizer import tokenizer_for

    return tokenizer_for(load_spec(None))
