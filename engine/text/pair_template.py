"""A (query, document) pair laid out as the Rust tokenizer's `post_process` lays it out.

Two things decide a cross-encoder's pair once both texts are tokenized: the post-processor's
pair template (BERT: [CLS] A [SEP] B [SEP], type ids 0 for A and its [SEP], 1 for B and its
[SEP]; XLM-R: <s> A </s></s> B </s>) and LongestFirst truncation to the limit less the
template's special tokens. `PairTemplate.probe` reads the template off the tokenizer by running
`post_process` on small probes, so that nothing here knows a model's special tokens;
`longest_first` is the Rust library's rule (tokenizers/src/utils/truncation.rs,
`truncate_encodings`), applied to one query's length and many documents' lengths at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tokenizers import Encoding, Tokenizer

# Probe texts of different lengths, empty ones included: the template is taken from the first
# and must give every probe's post_process output exactly.
_PROBES = (
    ("query probe", "a document probe"),
    ("one", "two three four five six"),
    ("", "document"),
    ("query", ""),
    ("", ""),
)

Special = tuple[int, int]  # (token id, type id)


@dataclass(frozen=True)
class PairTemplate:
    """The special tokens before, between and after a pair's two texts, and the texts' type ids."""

    prefix: tuple[Special, ...]
    middle: tuple[Special, ...]
    suffix: tuple[Special, ...]
    query_type: int
    document_type: int

    @property
    def num_specials(self) -> int:
        return len(self.prefix) + len(self.middle) + len(self.suffix)

    def layout(self, query: list[int], document: list[int]) -> tuple[list[int], list[int]]:
        """The pair's ids and type ids, untruncated."""
        ids = [i for i, _ in self.prefix] + query + [i for i, _ in self.middle] + document + [i for i, _ in self.suffix]
        types = [t for _, t in self.prefix] + [self.query_type] * len(query) + [t for _, t in self.middle] \
            + [self.document_type] * len(document) + [t for _, t in self.suffix]
        return ids, types

    @classmethod
    def probe(cls, tokenizer: Tokenizer) -> PairTemplate | None:
        """The template of an untruncated tokenizer; None where a pair is not its two texts' tokens,
        whole and in order, between fixed special tokens, or where truncation would reserve
        another number of tokens than the template adds."""
        def bare(text: str) -> Encoding:
            return tokenizer.encode(text, add_special_tokens=False)

        query, document = (bare(text) for text in _PROBES[0])
        template = cls._read(tokenizer.post_process(query, document, add_special_tokens=True), len(query.ids))
        if template is None or template.num_specials != tokenizer.num_special_tokens_to_add(is_pair=True):
            return None
        for query, document in ((bare(q), bare(d)) for q, d in _PROBES):
            pair = tokenizer.post_process(query, document, add_special_tokens=True)
            if template.layout(query.ids, document.ids) != (pair.ids, pair.type_ids):
                return None
        return template

    @classmethod
    def _read(cls, pair: Encoding, query_len: int) -> PairTemplate | None:
        """The template around a probe's two texts: the pair's tokens that are not special tokens
        are the query's, then the document's, each in one run."""
        texts = [i for i, special in enumerate(pair.special_tokens_mask) if not special]
        runs = texts[:query_len], texts[query_len:]
        if not all(runs) or any(run != list(range(run[0], run[-1] + 1)) for run in runs):
            return None
        (query_start, query_end), (doc_start, doc_end) = ((run[0], run[-1] + 1) for run in runs)
        tokens = list(zip(pair.ids, pair.type_ids))
        return cls(tuple(tokens[:query_start]), tuple(tokens[query_end:doc_start]), tuple(tokens[doc_end:]),
                   pair.type_ids[query_start], pair.type_ids[doc_start])


def longest_first(query_len: int, doc_lens: np.ndarray, max_length: int) -> tuple[np.ndarray, np.ndarray]:
    """How many of its tokens the query and each document keep in their pair, cut to `max_length`
    tokens together (the limit less the template's special tokens) as the Rust library cuts.

    A pair that fits is kept whole. Otherwise, where the shorter text fills at most half of
    `max_length`, it stays whole and the longer one is cut to the rest; else both are cut, the
    shorter to half (rounded down) and the longer to the other half, which takes the odd token.
    On a tie the query counts as the shorter.
    """
    query_keep = np.full(len(doc_lens), query_len, np.int64)
    doc_keep = np.asarray(doc_lens, np.int64).copy()
    over = query_len + doc_keep > max_length
    query_is_longer = query_len > doc_keep
    shorter = np.minimum(query_len, doc_keep)
    one_cut = over & (2 * shorter <= max_length)
    query_keep[one_cut & query_is_longer] = max_length - doc_keep[one_cut & query_is_longer]
    doc_keep[one_cut & ~query_is_longer] = max_length - query_len
    both_cut = over & ~one_cut
    half, other_half = max_length // 2, max_length // 2 + max_length % 2
    query_keep[both_cut] = np.where(query_is_longer[both_cut], other_half, half)
    doc_keep[both_cut] = np.where(query_is_longer[both_cut], half, other_half)
    return query_keep, doc_keep
