"""A WordPiece cross-encoder's fast pairs (engine/text/fast_pairs.py) are exactly the Rust path's.

The reference is PairTokenizer's own Rust path (`_encode_rust`: Rust Encodings cut and wrapped
by the Rust post-processor) on the same tokenizer: every pair's ids and the list of truncated
documents must match, on every length case of LongestFirst truncation and on random texts with
punctuation, odd whitespace, non-ASCII and control characters, and added tokens' text. The
default model's tokenizer (BERT uncased WordPiece) stands in for a BERT cross-encoder's.
"""

from __future__ import annotations

import json
import random
import shutil
import string
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from rose_embed.engine.model_files.loader import ModelSpec, load_spec
from rose_embed.engine.model_files.reranker import Reranker
from rose_embed.engine.text.pair_template import PairTemplate, longest_first
from rose_embed.engine.text.pairs import EncodedPairs, PairTokenizer, _tokenizer
from tests.conftest import load_texts
from tests.support.st_checkpoints import bpe_encoder_tokenizer, xlmr_tokenizer


@pytest.fixture(scope="module")
def bert_spec() -> ModelSpec:
    return replace(load_spec(None), reranker=Reranker("bert_pooler", "cls", "Sigmoid"))


def _pairs_at(spec: ModelSpec, max_seq_len: int) -> PairTokenizer:
    pairs = PairTokenizer(replace(spec, max_seq_len=max_seq_len))
    assert pairs._fast is not None, "the fast path stepped aside: nothing would be compared"
    return pairs


def _as_lists(encoded: EncodedPairs) -> tuple[list[list[int]], list[int]]:
    assert all(seq.dtype == np.int32 for seq in encoded.seqs)
    return [seq.tolist() for seq in encoded.seqs], encoded.truncated


def _assert_same(pairs: PairTokenizer, query: str, documents: list[str], max_doc_tokens: int | None) -> EncodedPairs:
    fast = pairs.encode(query, documents, max_doc_tokens)
    assert _as_lists(fast) == _as_lists(pairs._encode_rust(query, documents, max_doc_tokens)), \
        (query, documents, max_doc_tokens)
    return fast


def test_the_default_bert_tokenizer_takes_the_fast_path(bert_spec, monkeypatch):
    """No Rust Encoding per pair for plain ASCII texts: the Rust path is never entered."""
    pairs = PairTokenizer(bert_spec)
    assert pairs._fast is not None
    monkeypatch.setattr(pairs, "_encode_rust", lambda *args: pytest.fail("the Rust path ran"))
    texts = load_texts(40)
    encoded = pairs.encode(texts[0], texts[1:])
    assert len(encoded.seqs) == len(texts) - 1


def test_the_template_is_read_off_the_tokenizer(bert_spec, tmp_path):
    """BERT's [CLS] A [SEP] B [SEP] with its type ids; XLM-R's <s> A </s></s> B </s>, all type 0."""
    bert = _tokenizer(bert_spec, None)
    cls, sep = bert.token_to_id("[CLS]"), bert.token_to_id("[SEP]")
    assert PairTemplate.probe(bert) == PairTemplate(((cls, 0),), ((sep, 0),), ((sep, 1),), 0, 1)
    xlmr_tokenizer(tmp_path)
    xlmr = _tokenizer(replace(bert_spec, path=tmp_path), None)
    start, end = xlmr.token_to_id("<s>"), xlmr.token_to_id("</s>")
    assert PairTemplate.probe(xlmr) == PairTemplate(((start, 0),), ((end, 0), (end, 0)), ((end, 0),), 0, 0)


# Odd and even room for the two texts at both ends in the fast tier; every limit between in the slow one.
@pytest.mark.parametrize("max_seq_len", [n if n in (4, 5, 14, 15) else pytest.param(n, marks=pytest.mark.slow)
                                         for n in range(4, 16)])
def test_every_length_case_of_longest_first(bert_spec, max_seq_len):
    """Queries and documents of 0 to 16 tokens ("a" and "b" are one token each) against limits
    that leave 1 to 12 tokens for the two texts, odd and even: pairs that fit, only the document
    cut, only the query cut, both cut (the shorter, or the query on a tie, to the smaller half),
    and queries past the limit, which the Rust path takes."""
    pairs = _pairs_at(bert_spec, max_seq_len)
    documents = [" ".join("b" * n) for n in range(17)]
    for query_len in range(17):
        for max_doc_tokens in (None, 1, 5):
            _assert_same(pairs, " ".join("a" * query_len), documents, max_doc_tokens)


def test_longest_first_on_cases_worked_by_hand():
    """The rule itself, on cases worked out from the Rust source, with 7 tokens for both texts."""
    # A query of 3: documents of 2 and 4 fit; longer ones are cut to the 4 the query leaves.
    query_keep, doc_keep = longest_first(3, np.array([2, 4, 5, 9]), 7)
    assert query_keep.tolist() == [3, 3, 3, 3] and doc_keep.tolist() == [2, 4, 4, 4]
    # A query of 5: a tie and a longer document cut both, the query to 3 and the document to 4;
    # a document of 3 keeps its 3 and the query is cut to 4; one of 4 is the shorter, cut to 3;
    # one of 1 fits.
    query_keep, doc_keep = longest_first(5, np.array([5, 9, 3, 4, 1]), 7)
    assert query_keep.tolist() == [3, 3, 4, 4, 5] and doc_keep.tolist() == [4, 4, 3, 3, 1]
    # Both longer than the limit: the shorter keeps 3, the longer 4; on a tie the query keeps 3.
    query_keep, doc_keep = longest_first(12, np.array([9, 12, 20]), 7)
    assert query_keep.tolist() == [4, 3, 3] and doc_keep.tolist() == [3, 4, 4]


def test_a_cap_past_int64_cuts_nothing(bert_spec):
    """Cohere's max_tokens_per_doc may be any JSON integer: one too large for int64 (numpy's and the
    Rust tokenizer's limit) is a cap no document reaches, as no cap, on the fast and the Rust path."""
    pairs = _pairs_at(bert_spec, 32)
    documents = ["a short one", " ".join("b" * 40), "café au lait"]
    for query in ("a query", " ".join("a" * 40)):  # the second is past the limit: the Rust path
        uncut = _as_lists(pairs.encode(query, documents))
        for cap in (2**63, 2**64, 10**30):
            assert _as_lists(pairs.encode(query, documents, cap)) == uncut


_ODD_PIECES = ["café", "naïve", "日本語", "\U0001f600", "\x00", "\x0b", "\x1f", "\x7f", "\u00a0", "[SEP]",
               "[MASK]", "[cls]", "\t", "\r\n", "  "]


def _random_text(rng: random.Random, words: list[str], num_words: tuple[int, int], odd: float) -> str:
    pieces = []
    for _ in range(rng.randint(*num_words)):
        roll = rng.random()
        if roll < odd:
            pieces.append(rng.choice(_ODD_PIECES))
        elif roll < 0.75:
            pieces.append(rng.choice(words))
        elif roll < 0.9:
            pieces.append("".join(rng.choices(string.punctuation, k=rng.randint(1, 4))))
        else:
            pieces.append("".join(rng.choices(string.printable, k=rng.randint(1, 12))))
    glue = rng.choice([" ", "  ", "\n", "\t", "", " - "])
    return rng.choice(["", " ", "\n"]) + glue.join(pieces) + rng.choice(["", " ", "\t\n"])


# The longer limits take seconds each: the slow tier walks them.
@pytest.mark.parametrize(("max_seq_len", "rounds"), [(37, 40), (64, 32), pytest.param(128, 24, marks=pytest.mark.slow),
                                                     pytest.param(512, 8, marks=pytest.mark.slow)])
def test_random_pairs_equal_the_rust_path(bert_spec, max_seq_len, rounds):
    """Random queries and documents from a few tokens to past the limit, with and without
    max_doc_tokens, non-ASCII, control characters and added tokens' text mixed in; the pairs
    compared must reach every kind of cut, so that the check cannot pass on pairs that fit."""
    pairs = _pairs_at(bert_spec, max_seq_len)
    words = [w for text in load_texts(500) for w in text.split()]
    rng = random.Random(max_seq_len)
    limit, max_length = max_seq_len, max_seq_len - 3
    query_sizes = [(0, 3), (limit // 4, limit // 2), (limit // 2, limit), (limit, 2 * limit)]
    doc_sizes = [(0, 0), (0, 5), (limit // 4, limit // 2), (limit // 2, limit + 20)]
    kinds = set()
    for round_ in range(rounds):
        odd = 0.0 if round_ % 3 == 0 else 0.03
        query = _random_text(rng, words, query_sizes[round_ % 4], odd)
        documents = [_random_text(rng, words, rng.choice(doc_sizes), odd) for _ in range(rng.randint(1, 40))]
        documents += ["", " ", "\n\t "][: rng.randint(0, 3)]
        max_doc_tokens = rng.choice([None, None, 1, 7, limit // 3, 2 * limit])
        fast = _assert_same(pairs, query, documents, max_doc_tokens)
        query_len = len(pairs._plain.encode(query, add_special_tokens=False).ids)
        doc_lens = [len(e.ids) for e in pairs._plain.encode_batch(documents, add_special_tokens=False)]
        for seq, doc_len in zip(fast.seqs, doc_lens):
            doc_len = doc_len if max_doc_tokens is None else min(doc_len, max_doc_tokens)
            if query_len > limit:
                kinds.add("query past the limit")
            elif query_len + doc_len <= max_length:
                kinds.add("fits")
            elif 2 * min(query_len, doc_len) <= max_length:
                kinds.add("query cut" if query_len > doc_len else "document cut")
            else:
                kinds.add("both cut")
                assert len(seq) == max_seq_len
    assert kinds == {"fits", "document cut", "query cut", "both cut", "query past the limit"}


def _edited_bert(bert_spec: ModelSpec, tmp_path: Path, post_processor: dict) -> ModelSpec:
    """The default tokenizer with another post-processor."""
    out = tmp_path / "tok"
    shutil.copytree(bert_spec.path, out, ignore=shutil.ignore_patterns("*.safetensors", "*.bin", "*.onnx"))
    config = json.loads((out / "tokenizer.json").read_text())
    config["post_processor"] = post_processor
    (out / "tokenizer.json").write_text(json.dumps(config))
    return replace(bert_spec, path=out)


def test_another_template_is_followed(bert_spec, tmp_path):
    """A template of two separators between the texts and another type id: taken from the tokenizer."""
    special = {"[CLS]": {"id": "[CLS]", "ids": [101], "tokens": ["[CLS]"]},
               "[SEP]": {"id": "[SEP]", "ids": [102], "tokens": ["[SEP]"]}}
    piece = [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
             {"SpecialToken": {"id": "[SEP]", "type_id": 0}}]
    pair = [*piece, {"SpecialToken": {"id": "[SEP]", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}},
            {"SpecialToken": {"id": "[SEP]", "type_id": 1}}]
    spec = _edited_bert(bert_spec, tmp_path, {"type": "TemplateProcessing", "single": piece, "pair": pair,
                                               "special_tokens": special})
    pairs = _pairs_at(spec, 40)
    texts = load_texts(120)
    for start in range(0, 120, 30):
        encoded = _assert_same(pairs, texts[start] * 2, texts[start + 1 : start + 30], None)
        assert encoded.truncated
    offset = spec.hf_config["vocab_size"]
    assert encoded.seqs[0][:2].tolist() == [101, *pairs._plain.encode(texts[90] * 2, add_special_tokens=False).ids[:1]]
    assert offset + 102 in encoded.seqs[0].tolist()


def test_tokenizers_the_fast_path_does_not_cover_step_aside(bert_spec, tmp_path):
    """XLM-R's unigram and ModernBERT's byte-level BPE keep the Rust path."""
    for name, write in (("xlmr", xlmr_tokenizer), ("bpe", bpe_encoder_tokenizer)):
        out = tmp_path / name
        out.mkdir()
        write(out)
        pairs = PairTokenizer(replace(bert_spec, path=out, architecture="xlm-roberta", hf_config={}))
        assert pairs._fast is None
        texts = load_texts(10)
        assert _as_lists(pairs.encode(texts[0], texts[1:])) == _as_lists(pairs._encode_rust(texts[0], texts[1:], None))
