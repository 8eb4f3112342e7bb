"""A fake sparse encoder (SPLADE) for the fast tier: the default model's tokenizer, and sparse vectors
that depend on every token and its position, so that order, parts, packing, prompts, truncation
and the answer's layout are really checked.

Each token t of a text lights EXPANSION dimensions, (t + j * STRIDE) mod V for j < EXPANSION (the
first is t itself, so `return_text` names the text's own tokens among others), each with a fixed
weight per (t, j) scaled by a per-position weight; a dimension's value is the largest of those
that light it (max pooling). `execute_packed` writes the rows as the engine does
(engine/contract/sparse_rows.py: count, then the largest values and their ids); `pairs_of`
computes each text's pairs one at a time, uncut, as the reference a test compares the server with.
A text of a few hundred tokens lights more dimensions than a row holds.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise

import numpy as np
import torch

from rose_embed.engine.contract.batch import PackedBatch
from rose_embed.engine.contract.sparse_rows import row_width
from rose_embed.engine.model_files.sparse import SparseModel
from rose_embed.engine.rose.lazy import LazyResult
from tests.support.fake_engine import FakeEngine

FAKE_SPARSE = "rose-test/fake-splade"
EXPANSION = 24
STRIDE = 1009


class FakeSparse(FakeEngine):
    def __init__(self, name: str = FAKE_SPARSE, max_active_dims: int | None = None,
                 prompts: dict[str, str] | None = None):
        super().__init__(dim=2, name=name, prompts=prompts)
        vocab_size = int(self.spec.hf_config["vocab_size"])
        sparse = SparseModel("bert", "max", "relu", vocab_size, max_active_dims)
        self.spec = replace(self.spec, sparse=sparse, pooling="max", normalize=False, matryoshka_dims=(),
                            embedding_dim=row_width(sparse.num_slots))
        rng = np.random.default_rng(11)
        self._weights = rng.uniform(0.05, 2.0, (vocab_size, EXPANSION)).astype(np.float32)
        self._position_weights = rng.uniform(0.5, 1.5, self.spec.max_seq_len).astype(np.float32)
        self._steps = np.arange(EXPANSION) * STRIDE

    def _vector(self, ids: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One sequence's non-zero (dims ascending, values), uncut."""
        dims = ((ids[:, None] + self._steps[None, :]) % self.spec.sparse.vocab_size).ravel()
        values = (self._weights[ids] * self._position_weights[positions][:, None]).ravel()
        unique, where = np.unique(dims, return_inverse=True)
        pooled = np.zeros(len(unique), np.float32)
        np.maximum.at(pooled, where, values)
        return unique, pooled

    def _row(self, dims: np.ndarray, values: np.ndarray) -> np.ndarray:
        num_slots = self.spec.sparse.num_slots
        row = np.zeros(row_width(num_slots), np.float32)
        largest = np.argsort(-values, kind="stable")[:num_slots]
        row[0] = len(dims)
        row[1 : 1 + len(largest)] = dims[largest]
        row[1 + num_slots : 1 + num_slots + len(largest)] = values[largest]
        return row

    def execute_packed(self, batch: PackedBatch) -> LazyResult:
        bounds = batch.cu_seqlens
        rows = np.stack([self._row(*self._vector(batch.input_ids[lo:hi], batch.positions[lo:hi]))
                         for lo, hi in pairwise(bounds)])
        self.batches.append((batch.num_seqs, batch.num_tokens))
        self.outputs.append(batch.num_outputs)
        self.num_eager_runs += 1
        return LazyResult(torch.from_numpy(rows), batch.num_outputs)

    def pairs_of(self, texts: list[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Each text's (indices ascending, values), computed alone; cut to the top-k where the model has one."""
        pairs = []
        for ids in self.tokenize(texts):
            dims, values = self._vector(ids, np.arange(len(ids)))
            if self.spec.sparse.max_active_dims is not None:
                kept = np.sort(np.argsort(-values, kind="stable")[: self.spec.sparse.max_active_dims])
                dims, values = dims[kept], values[kept]
            pairs.append((dims, values))
        return pairs
