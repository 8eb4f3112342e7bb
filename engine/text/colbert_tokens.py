"""A ColBERT model's queries and documents as token ids, with one pooling segment per kept token.

The tokens are those `pylate.models.ColBERT.tokenize` feeds the model (engine/model_files/colbert.py):
the text cut to `length - 1` tokens (its special tokens kept at the ends, as the tokenizer's own
truncation keeps them), the query or document prefix token put after the first token, and a query
padded with its expansion token to query_length: marked as hidden keys (engine/contract/hidden_keys.py)
where the model does not attend to them (attend_to_expansion_tokens false).

Each kept token is a segment of its own (engine/contract/batch.py): the engine pools a segment of
one token into that token's state, so the model's ordinary head (Dense, then L2 normalisation) gives
one vector per kept token, in the text's order, and the packed batch already holds them as rows.
A document's skiplist tokens are in no segment: they take part in attention, as in PyLate, but
give no vector.
"""

from __future__ import annotations

import numpy as np

from rose_embed.engine.contract.hidden_keys import hide_as_keys
from rose_embed.engine.model_files.colbert import ColbertModel
from rose_embed.engine.text.tokenizer import TextTokenizer


def _cut(ids: np.ndarray, limit: int, after: tuple[int, ...]) -> np.ndarray:
    """`ids` cut to `limit` tokens, those the tokenizer puts after a text kept at the end."""
    if len(ids) <= limit:
        return ids
    if after and len(after) < limit and tuple(ids[len(ids) - len(after):].tolist()) == after:
        return np.concatenate([ids[: limit - len(after)], np.asarray(after, dtype=np.int32)])
    return ids[:limit]


def _with_prefix(ids: np.ndarray, prefix_id: int | None) -> np.ndarray:
    if prefix_id is None:
        return ids
    return np.concatenate([ids[:1], np.asarray([prefix_id], dtype=np.int32), ids[1:]])


class ColbertTokenizer:
    """Texts -> (token ids per text, segment ids per text) for a ColBERT model's queries or documents."""

    def __init__(self, tokenizer: TextTokenizer, colbert: ColbertModel):
        self.tokenizer = tokenizer
        self.colbert = colbert
        try:
            self._before, self._after = tokenizer.wrapping()
        except ValueError:
            self._before, self._after = (), ()

    def text_limit(self, is_query: bool) -> int:
        """Tokens a text keeps before its prefix is put in."""
        colbert = self.colbert
        length, prefix_id = ((colbert.query_length, colbert.query_prefix_id) if is_query
                             else (colbert.document_length, colbert.document_prefix_id))
        return length - 1 if prefix_id is not None else length

    def encode(self, texts: list[str], is_query: bool,
               max_own_tokens: int | None = None) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """(ids [n] int32, segment ids [n] int32: 0, 1, ... for the kept tokens, -1 for the others) per text.
        `max_own_tokens`: a text's own tokens (its special tokens aside) cut to this many first, where
        that is shorter than the model's length (rerank's max_tokens_per_doc)."""
        colbert = self.colbert
        limit = self.text_limit(is_query)
        if max_own_tokens is not None:
            limit = min(limit, max_own_tokens + len(self._before) + len(self._after))
        prefix_id = colbert.query_prefix_id if is_query else colbert.document_prefix_id
        seqs, segments = [], []
        for ids in self.tokenizer.encode(texts):
            ids = _with_prefix(_cut(np.asarray(ids, dtype=np.int32), limit, self._after), prefix_id)
            if is_query and colbert.expansion_id is not None and len(ids) < colbert.query_length:
                pad = np.full(colbert.query_length - len(ids), colbert.expansion_id, dtype=np.int32)
                ids = np.concatenate([ids, hide_as_keys(pad) if colbert.hides_expansion else pad])
            if is_query or not colbert.skiplist_ids:
                kept = np.ones(len(ids), dtype=bool)
            else:
                kept = ~np.isin(ids, np.fromiter(colbert.skiplist_ids, dtype=np.int32))
            segment_ids = np.where(kept, np.cumsum(kept) - 1, -1).astype(np.int32)
            seqs.append(ids)
            segments.append(segment_ids)
        return seqs, segments
