"""(query, document) pairs -> one token sequence each, built as the reranker's reference builds it;
a classifier's pairs of texts (TEI's /predict) are built as a cross-encoder's.

A cross-encoder's pair is what its tokenizer makes of two texts ([CLS] q [SEP] d [SEP] for
BERT, <s> q </s></s> d </s> for XLM-R), truncated longest-first to the model's limit, as
sentence-transformers' CrossEncoder.predict tokenizes it (texts as they are, not stripped).
A BERT cross-encoder also reads token types: the document's ids come as id + vocab_size, which
its embeddings read back (engine/rose/models/bert.py), so that the stream stays one id per token.
Only where its tokenizer hands token_type_ids to the model, though (`reads_token_types`).

Qwen3-Reranker's pair is its model card's prompt: the formatted instruction, query and document
tokenized as one text and cut to the limit less the template's prefix and suffix, then wrapped
in them (engine/model_files/reranker.py holds the template).

`max_doc_tokens` (Cohere's max_tokens_per_doc) cuts each document to that many of its own
tokens first.

A WordPiece cross-encoder's pairs take a fast path (engine/text/fast_pairs.py) that gives the
same ids without a Rust Encoding per pair; `_encode_rust` is the reference it is held to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from tokenizers import Encoding, Tokenizer

from rose_embed.engine.model_files.json_files import read_json_object
from rose_embed.engine.model_files.reranker import QWEN3_BODY, QWEN3_INSTRUCTION, QWEN3_PREFIX, QWEN3_SUFFIX
from rose_embed.engine.model_files.tokenizer_file import read_tokenizer
from rose_embed.engine.text.fast_pairs import FastPairs

if TYPE_CHECKING:  # the loader imports what a tokenizer-only process does without
    from rose_embed.engine.model_files.loader import ModelSpec

# No document holds this many tokens, so a larger cap cuts nothing; numpy's int64 arithmetic (the
# fast path) and the Rust tokenizer's truncation overflow on one past it.
_LARGEST_DOC_CAP = int(np.iinfo(np.int64).max)


@dataclass
class EncodedPairs:
    """One sequence per document (int32 ids), and which documents' pairs were cut to fit the limit."""

    seqs: list[np.ndarray]
    truncated: list[int]


def reads_token_types(spec: ModelSpec) -> bool:
    """Whether a cross-encoder's (or a classifier's) second text gets the second token type. The model must have one,
    and its tokenizer must give token_type_ids: a tokenizer_config.json whose model_input_names
    leaves them out makes transformers (and so CrossEncoder.predict) run every token as the first type."""
    if spec.kind == "embed" or spec.architecture != "bert" or spec.hf_config.get("type_vocab_size", 1) < 2:
        return False
    names = (read_json_object(spec.path / "tokenizer_config.json") or {}).get("model_input_names")
    return not isinstance(names, list) or "token_type_ids" in names


def _tokenizer(spec: ModelSpec, max_length: int | None) -> Tokenizer:
    tokenizer = read_tokenizer(spec.path / "tokenizer.json")
    tokenizer.no_padding()
    if max_length is None:
        tokenizer.no_truncation()
    else:
        tokenizer.enable_truncation(max_length=max_length, strategy="longest_first")
    return tokenizer


class PairTokenizer:
    """Builds a reranker's (or a classifier's) pairs; safe to call from several threads (the Rust tokenizer is;
    the fast path holds the GIL, so threads add no parallelism there)."""

    def __init__(self, spec: ModelSpec):
        if spec.kind == "embed":
            raise ValueError("pairs are tokenized for rerankers and classifiers only")
        self.max_seq_len = spec.max_seq_len
        self.is_template = spec.reranker is not None and spec.reranker.is_template
        self._plain = _tokenizer(spec, None)
        self._fast: FastPairs | None = None
        # BERT's second token type, marked in the ids (see engine/rose/engine.py's pair_options).
        self._second_offset = None
        if reads_token_types(spec):
            self._second_offset = int(spec.hf_config["vocab_size"])
        if self.is_template:
            self._prefix = self._plain.encode(QWEN3_PREFIX, add_special_tokens=False).ids
            self._suffix = self._plain.encode(QWEN3_SUFFIX, add_special_tokens=False).ids
            body_limit = self.max_seq_len - len(self._prefix) - len(self._suffix)
            if body_limit < 1:
                raise ValueError(f"the maximum length {self.max_seq_len} leaves no room inside the reranker's template")
            self._truncating = _tokenizer(spec, body_limit)
        else:
            self._truncating = _tokenizer(spec, self.max_seq_len)
            self._num_pair_specials = self._plain.num_special_tokens_to_add(is_pair=True)
            self._fast = FastPairs.for_tokenizer(self._plain, self.max_seq_len, self._second_offset)

    def encode(self, query: str, documents: list[str], max_doc_tokens: int | None = None) -> EncodedPairs:
        """The sequences of (query, document) for each document, in order."""
        if max_doc_tokens is not None:
            max_doc_tokens = min(max_doc_tokens, _LARGEST_DOC_CAP)
        if self.is_template:
            return self._encode_template(query, documents, max_doc_tokens)
        fast = self._fast.encode(query, documents, max_doc_tokens) if self._fast is not None else None
        if fast is not None:
            return EncodedPairs(*fast)
        return self._encode_rust(query, documents, max_doc_tokens)

    def encode_each(self, pairs: list[tuple[str, str]]) -> EncodedPairs:
        """The sequence of each (first, second) pair, in order, cut as `encode` cuts a query's pairs."""
        seqs, truncated = [], []
        for i, (first, second) in enumerate(pairs):
            one = self.encode(first, [second])
            seqs += one.seqs
            truncated += [i] if one.truncated else []
        return EncodedPairs(seqs, truncated)

    def _encode_rust(self, query: str, documents: list[str], max_doc_tokens: int | None) -> EncodedPairs:
        """A cross-encoder's pairs from Rust Encodings, cut and wrapped by the Rust post-processor."""
        query_enc = self._plain.encode(query, add_special_tokens=False)
        docs = self._plain.encode_batch(documents, add_special_tokens=False)
        seqs, truncated = [], []
        room = self.max_seq_len - self._num_pair_specials - len(query_enc.ids)
        for i, doc in enumerate(docs):
            if max_doc_tokens is not None and len(doc.ids) > max_doc_tokens:
                doc.truncate(max_doc_tokens)
            if len(doc.ids) > room:
                truncated.append(i)
            pair = self._truncating.post_process(query_enc, doc, add_special_tokens=True)
            seqs.append(self._ids(pair))
        return EncodedPairs(seqs, truncated)

    def _ids(self, pair: Encoding) -> np.ndarray:
        ids = np.asarray(pair.ids, dtype=np.int32)
        if self._second_offset is not None:
            ids = np.where(np.asarray(pair.type_ids) > 0, ids + self._second_offset, ids).astype(np.int32)
        return ids

    def _encode_template(self, query: str, documents: list[str], max_doc_tokens: int | None) -> EncodedPairs:
        if max_doc_tokens is not None:
            documents = [self._cut(doc, max_doc_tokens) for doc in documents]
        bodies = [QWEN3_BODY.format(instruction=QWEN3_INSTRUCTION, query=query, document=doc) for doc in documents]
        seqs, truncated = [], []
        for i, body in enumerate(self._truncating.encode_batch(bodies, add_special_tokens=True)):
            if body.overflowing:
                truncated.append(i)
            seqs.append(np.asarray([*self._prefix, *body.ids, *self._suffix], dtype=np.int32))
        return EncodedPairs(seqs, truncated)

    def _cut(self, document: str, max_tokens: int) -> str:
        """The document up to the end of its `max_tokens`-th token (the template tokenizes it within its prompt)."""
        offsets = self._plain.encode(document, add_special_tokens=False).offsets
        return document if len(offsets) <= max_tokens else document[: offsets[max_tokens - 1][1]]
