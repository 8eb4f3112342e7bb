"""The CPU runs a batch in pieces of at most CPU_CHUNK_TOKENS tokens (engine/rose/runner.py):
the pieces must cover the batch exactly, and their vectors must be the whole batch's."""

from __future__ import annotations

import numpy as np
import pytest

from rose_embed.engine.rose import runner
from rose_embed.engine.contract.batch import pack, split_packed


@pytest.mark.parametrize("seed", range(20))
def test_split_packed_covers_the_batch_in_order_within_the_cap(seed):
    rng = np.random.default_rng(seed)
    seqs = [rng.integers(0, 1000, int(n), dtype=np.int32) for n in rng.integers(1, 300, rng.integers(1, 60))]
    batch = pack(seqs)
    cap = int(rng.integers(1, 2000))
    parts = split_packed(batch, cap)
    assert sum(p.num_seqs for p in parts) == batch.num_seqs
    assert np.array_equal(np.concatenate([p.input_ids for p in parts]), batch.input_ids)
    assert np.array_equal(np.concatenate([p.positions for p in parts]), batch.positions)
    lengths = np.concatenate([np.diff(p.cu_seqlens) for p in parts])
    assert np.array_equal(lengths, np.diff(batch.cu_seqlens))
    for p in parts:
        assert p.cu_seqlens[0] == 0 and p.cu_seqlens[-1] == len(p.input_ids)
        assert p.num_tokens <= cap or p.num_seqs == 1  # a longer sequence goes alone
        assert p.max_seqlen == int(np.diff(p.cu_seqlens).max())


def test_a_batch_in_pieces_gives_the_vectors_of_the_whole(default_engine, texts, monkeypatch):
    seqs = default_engine.tokenize(texts[:120])
    monkeypatch.setattr(runner, "CPU_CHUNK_TOKENS", 10**9)
    whole = default_engine.runner.execute(pack(seqs)).wait().copy()
    monkeypatch.setattr(runner, "CPU_CHUNK_TOKENS", 300)
    assert len(split_packed(pack(seqs), 300)) > 5
    pieces = default_engine.runner.execute(pack(seqs)).wait()
    assert pieces.shape == whole.shape
    np.testing.assert_allclose(pieces, whole, atol=2e-6)
