"""Tokens hidden as attention keys (engine/contract/hidden_keys.py): marked in the ids, the marks survive
packing, slicing, joining and splitting as ids do, and the runner's reveal gives back the real ids and
each sequence's count of keys; marks that are not a sequence's last tokens, or hide all of them, are refused."""

from __future__ import annotations

import numpy as np
import pytest

from rose_embed.engine.contract.batch import join_packed, pack, split_packed
from rose_embed.engine.contract.hidden_keys import hide_as_keys, reveal_hidden_keys

MASK = 103


def _query(own: list[int], pad: int) -> np.ndarray:
    return np.concatenate([np.asarray(own, np.int32), hide_as_keys(np.full(pad, MASK, np.int32))])


def test_marks_are_below_every_real_id_and_come_back():
    marked = hide_as_keys(np.array([0, MASK, 250_000], np.int32))
    assert (marked < 0).all() and np.invert(marked).tolist() == [0, MASK, 250_000]


def test_reveal_gives_the_real_ids_and_each_sequences_keys():
    seqs = [_query([101, 1, 2, 102], 4), np.array([101, 7, 8, 9, 102], np.int32), _query([101, 102], 6),
            np.array([101, MASK, 102], np.int32)]  # a [MASK] the text itself holds is a key like any token
    batch = pack(seqs, [np.arange(len(s), dtype=np.int32) for s in seqs])
    revealed, num_keys = reveal_hidden_keys(batch)
    assert num_keys.tolist() == [4, 5, 2, 3] and num_keys.dtype == np.int32
    assert revealed.input_ids.min() >= 0
    assert revealed.input_ids[:8].tolist() == [101, 1, 2, 102] + [MASK] * 4
    for name in ("positions", "cu_seqlens", "segment_ids", "cu_segments"):
        assert np.array_equal(getattr(revealed, name), getattr(batch, name))
    assert batch.input_ids.min() < 0  # the batch handed in (the arena's views) is left as it was


def test_a_batch_without_marks_is_handed_back_as_it_is():
    batch = pack([np.array([101, 5, 102], np.int32), np.array([101, 102], np.int32)])
    revealed, num_keys = reveal_hidden_keys(batch)
    assert revealed is batch and num_keys is None


def test_marks_survive_slicing_joining_and_splitting():
    seqs = [_query([101, i, 102], 5) for i in range(6)] + [np.arange(1, 40, dtype=np.int32)]
    batch = pack(seqs)
    parts = split_packed(batch, 20)
    assert len(parts) > 2
    for part in parts:  # the long sequence alone hides nothing
        lengths = np.diff(part.cu_seqlens).tolist()
        _, num_keys = reveal_hidden_keys(part)
        assert (lengths if num_keys is None else num_keys.tolist()) == [3 if n == 8 else n for n in lengths]
    rejoined = join_packed(*parts)
    assert np.array_equal(rejoined.input_ids, batch.input_ids)
    assert reveal_hidden_keys(rejoined)[1].tolist() == [3] * 6 + [39]


@pytest.mark.parametrize("seqs,named", [
    ([np.concatenate([hide_as_keys(np.array([MASK])), np.array([101, 102], np.int32)])], "must be the last"),
    ([np.array([5], np.int32), hide_as_keys(np.full(3, MASK, np.int32))], "hides every one of its tokens"),
])
def test_marks_the_attention_cannot_take_are_refused(seqs, named):
    with pytest.raises(ValueError, match=named):
        reveal_hidden_keys(pack(seqs))
