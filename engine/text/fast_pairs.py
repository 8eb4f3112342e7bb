"""A WordPiece cross-encoder's pairs without a Rust Encoding per pair, exact to the Rust path.

The Rust path (engine/text/pairs.py) tokenizes the documents, then runs `post_process` once per
document: an Encoding object built and read back for every pair, most of what a rerank request
costs the front end. Here the query and the documents are tokenized by the ASCII WordPiece fast
path (engine/text/ascii_wordpiece.py, which leaves the texts it cannot take to the Rust
tokenizer), and each pair is cut and wrapped with array operations after the tokenizer's own
template and LongestFirst rule (engine/text/pair_template.py).

A document is tokenized up to one token past the model's limit only. What its pair depends on
is how many of its tokens it keeps (never more than the limit), whether it is longer than the
room the query leaves, and whether it is longer than the query; all three come out the same
for any count past both the limit and the query's length. So a query longer than the limit
itself goes to the Rust path, where the documents' full lengths decide.
"""

from __future__ import annotations

import numpy as np
from tokenizers import Tokenizer

from rose_embed.engine.text.ascii_wordpiece import AsciiWordPiece
from rose_embed.engine.text.pair_template import PairTemplate, Special, longest_first


class FastPairs:
    """(query, documents) -> each pair's ids (int32) and which pairs were cut; None where the Rust
    path must decide."""

    def __init__(self, tokenizer: Tokenizer, words: AsciiWordPiece, template: PairTemplate, max_seq_len: int,
                 second_offset: int | None):
        self._tokenizer = tokenizer
        self._encode_batch = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)
        self._words = words
        self._word_limit = max_seq_len + 1
        self._max_length = max_seq_len - template.num_specials

        def mark(type_id: int) -> int:
            """What the ids of a token type carry: BERT's second type, marked as pairs.py marks it."""
            return second_offset if second_offset is not None and type_id > 0 else 0

        def ids(specials: tuple[Special, ...]) -> np.ndarray:
            return np.array([i + mark(t) for i, t in specials], np.int32)

        self._prefix, self._middle, self._suffix = ids(template.prefix), ids(template.middle), ids(template.suffix)
        self._query_mark, self._document_mark = mark(template.query_type), mark(template.document_type)

    @classmethod
    def for_tokenizer(cls, tokenizer: Tokenizer, max_seq_len: int, second_offset: int | None) -> FastPairs | None:
        """The fast path for an untruncated tokenizer that is BERT's pipeline with a fixed pair
        template; None for any other."""
        template = PairTemplate.probe(tokenizer)
        if template is None or max_seq_len <= template.num_specials:
            return None
        words = AsciiWordPiece.for_tokenizer(tokenizer, (), (), max_seq_len + 1)
        if words is None:
            return None
        return cls(tokenizer, words, template, max_seq_len, second_offset)

    def encode(self, query: str, documents: list[str],
               max_doc_tokens: int | None) -> tuple[list[np.ndarray], list[int]] | None:
        """Each pair's ids and the indices of the documents cut to fit, as pairs.py's Rust path
        gives them; None for a query longer than the limit."""
        query_ids = self._words.encode(query)
        if query_ids is None:
            query_ids = np.asarray(self._tokenizer.encode(query, add_special_tokens=False).ids, np.int32)
        query_len = len(query_ids)
        if query_len >= self._word_limit:
            return None
        flat, lengths = self._words.encode_packed(documents, self._rust_ids)
        doc_starts = np.zeros(len(documents), np.int64)
        np.cumsum(lengths[:-1], out=doc_starts[1:])
        doc_lens = lengths.astype(np.int64)
        if max_doc_tokens is not None:
            np.minimum(doc_lens, max_doc_tokens, out=doc_lens)
        truncated = np.flatnonzero(doc_lens > self._max_length - query_len).tolist()
        query_keep, doc_keep = longest_first(query_len, doc_lens, self._max_length)
        query_ids = query_ids + np.int32(self._query_mark)
        doc_ids = flat + np.int32(self._document_mark)
        heads: dict[int, np.ndarray] = {}  # the pair up to the document, per length the query keeps
        seqs = []
        for start, query_kept, doc_kept in zip(doc_starts.tolist(), query_keep.tolist(), doc_keep.tolist()):
            head = heads.get(query_kept)
            if head is None:
                head = heads[query_kept] = np.concatenate((self._prefix, query_ids[:query_kept], self._middle))
            seqs.append(np.concatenate((head, doc_ids[start : start + doc_kept], self._suffix)))
        return seqs, truncated

    def _rust_ids(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self._encode_batch(texts, add_special_tokens=False)]
