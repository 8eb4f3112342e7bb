"""Tokens hidden as attention keys, marked in a packed batch's token ids.

A PyLate ColBERT model that pads queries with [MASK] and does not attend to them
(attend_to_expansion_tokens false) hands its transformer an attention mask that is 0 on those
tokens: no token, [MASK]s included, reads a [MASK] as a key, while every [MASK] still reads the
query's own tokens and gives a vector. The tokenizer marks such a token by storing its id as
`~id` (below 0, so never a real id); the marks travel with the ids through pieces, the arena,
the queue's slicing and joining, with no field of their own. The runner takes them out before
the model runs (`reveal_hidden_keys`) and hands the attention each sequence's count of keys.

Hidden tokens must be the last tokens of their sequence, after one key at least: the attention
backends take "the first num_keys tokens are keys", the form a padding mask of trailing tokens has.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from rose_embed.engine.contract.batch import PackedBatch


def hide_as_keys(ids: np.ndarray) -> np.ndarray:
    """Token ids [n] int32 marked as hidden keys (each stored as ~id)."""
    return np.invert(np.asarray(ids, dtype=np.int32))


def reveal_hidden_keys(batch: PackedBatch) -> tuple[PackedBatch, np.ndarray | None]:
    """(the batch with its real token ids, num_keys [B] int32: the first tokens of each sequence that
    are keys), or (the batch itself, None) where no token is hidden: one pass over the ids then.
    ValueError where a hidden token is not among its sequence's last tokens or hides them all."""
    ids = batch.input_ids
    if len(ids) == 0 or int(ids.min()) >= 0:
        return batch, None
    hidden = ids < 0
    cu = batch.cu_seqlens.astype(np.int64)
    counted = np.concatenate([[0], np.cumsum(hidden, dtype=np.int64)])
    lengths = np.diff(cu)
    num_keys = lengths - (counted[cu[1:]] - counted[cu[:-1]])
    seq_of = np.repeat(np.arange(batch.num_seqs), lengths)
    offset = np.arange(len(ids)) - cu[:-1][seq_of]  # each token's place in its sequence
    if np.any(hidden & (offset < num_keys[seq_of])):
        raise ValueError("a token hidden as a key stands before one of its sequence's keys; hidden tokens must "
                         "be the last of their sequence")
    if np.any((num_keys == 0) & (lengths > 0)):
        raise ValueError("a sequence hides every one of its tokens as a key; its queries would see none")
    return replace(batch, input_ids=np.where(hidden, np.invert(ids), ids).astype(np.int32)), num_keys.astype(np.int32)
