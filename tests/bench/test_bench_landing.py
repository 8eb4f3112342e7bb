"""gpu_bench's pass of the engine (bench/gpu_bench.py's run_ours): every batch's vectors land in
their own rows, in order, and a timed pass reuses the buffer it is given."""

from __future__ import annotations

import numpy as np
import torch

from bench.gpu_bench import run_ours
from rose_embed.engine.rose.lazy import LazyResult


class FirstTokenRunner:
    """Stands in for ModelRunner: a sequence's "vector" is its first token id, repeated."""

    def __init__(self):
        self.num_batches = 0

    def execute(self, batch) -> LazyResult:
        self.num_batches += 1
        firsts = batch.input_ids[batch.cu_seqlens[:-1]].astype(np.float32)
        return LazyResult(torch.from_numpy(np.repeat(firsts[:, None], 4, axis=1)), batch.num_seqs)


def test_every_batch_lands_in_its_own_rows_in_order():
    rng = np.random.default_rng(0)
    seqs = [rng.integers(1, 1000, n).astype(np.int32) for n in rng.integers(1, 40, 500)]
    runner = FirstTokenRunner()
    vectors = run_ours(runner, seqs, max_batch_tokens=256, max_batch_seqs=16)
    assert runner.num_batches > 30  # many batches, cut by both caps
    assert vectors.shape == (500, 4)
    np.testing.assert_array_equal(vectors[:, 0], [s[0] for s in seqs])


def test_a_timed_pass_reuses_the_buffer_it_is_given():
    rng = np.random.default_rng(1)
    seqs = [rng.integers(1, 1000, n).astype(np.int32) for n in rng.integers(1, 40, 100)]
    landing = run_ours(FirstTokenRunner(), seqs, 256, 16)
    landing[:] = -1
    again = run_ours(FirstTokenRunner(), seqs, 256, 16, landing)
    assert again is landing
    np.testing.assert_array_equal(landing[:, 0], [s[0] for s in seqs])
