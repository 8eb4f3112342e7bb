"""A ColBERT rerank request's sequences: its query, then some of its documents, group after group.

The engine scores a document against the query whose tokens come before it in the batch
(engine/rose/layers/maxsim_head.py, engine/contract/batch.py), so each group carries its query:
the query's tokens (query mode: prefix, expansion) with segment id QUERY_TOKEN, then each document
(document mode: prefix, skiplist) whose kept tokens all pool into the document's one row (segment
id 0 within it) and whose skiplist tokens into none (-1). A group holds as many documents as fit
the batch budget beside the query (one at least), so that no piece or batch has to cut a group;
the query is repeated in each group, a few dozen tokens against a batch of documents.
"""

from __future__ import annotations

import numpy as np

from rose_embed.engine.contract.batch import QUERY_TOKEN
from rose_embed.engine.text.colbert_tokens import ColbertTokenizer


def rerank_groups(query: np.ndarray, documents: list[np.ndarray], kept: list[np.ndarray], max_tokens: int,
                  max_seqs: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(sequences, their segment ids): the query then documents, per group of at most `max_tokens`
    tokens and `max_seqs` sequences (the query and one document always). `kept[i]`: document i's
    segment ids as ColbertTokenizer.encode gives them (>= 0 for a kept token)."""
    query_segments = np.full(len(query), QUERY_TOKEN, dtype=np.int32)
    seqs, segments = [], []
    num_tokens = num_seqs = 0
    for ids, segment_ids in zip(documents, kept):
        if num_seqs == 0 or num_tokens + len(ids) > max_tokens or num_seqs + 1 > max_seqs:
            seqs.append(query)
            segments.append(query_segments)
            num_tokens, num_seqs = len(query), 1
        seqs.append(ids)
        segments.append(np.where(segment_ids >= 0, 0, -1).astype(np.int32))
        num_tokens += len(ids)
        num_seqs += 1
    return seqs, segments


def encode_rerank(tokenizer: ColbertTokenizer, query: str, documents: list[str], max_doc_tokens: int | None,
                  max_tokens: int, max_seqs: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The query and documents tokenized as PyLate encodes them, in groups (`rerank_groups`)."""
    (query_ids,), _ = tokenizer.encode([query], is_query=True)
    document_ids, kept = tokenizer.encode(documents, is_query=False, max_own_tokens=max_doc_tokens)
    return rerank_groups(query_ids, document_ids, kept, max_tokens, max_seqs)
