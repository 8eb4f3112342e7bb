"""A fake reranker for the fast tier: the default model's tokenizer and pair tokenizer, and a score
that depends on every token of the pair and its position, so that order, top_n, parts and
packing across requests are really checked.

A pair's raw logit is the mean over its tokens of a fixed per-token number scaled by a
per-position weight; its score is the sigmoid of that. `scores_of` computes the same numbers
one pair at a time, without packing, as the reference a test compares the server with.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from rose_embed.engine.model_files.reranker import Reranker
from rose_embed.engine.contract.batch import PackedBatch
from rose_embed.engine.rose.lazy import LazyResult
from rose_embed.engine.text.pairs import PairTokenizer
from tests.support.fake_engine import FakeEngine

FAKE_RERANKER = "rose-test/fake-reranker"


class FakeReranker(FakeEngine):
    def __init__(self, name: str = FAKE_RERANKER, delay: float = 0.0):
        super().__init__(dim=2, name=name, delay=delay)
        self.spec = replace(self.spec, reranker=Reranker("bert_pooler", "cls", "Sigmoid"), pooling="cls",
                            normalize=False, embedding_dim=2, matryoshka_dims=())
        self.pairs = PairTokenizer(self.spec)
        rng = np.random.default_rng(7)
        self._token_logits = rng.standard_normal(2 * self.vocab_size)  # second-type ids too (engine/text/pairs.py)
        self._position_weights = rng.uniform(0.5, 1.5, self.spec.max_seq_len)

    def _rows(self, logits: np.ndarray) -> np.ndarray:
        return np.stack([1 / (1 + np.exp(-logits)), logits], axis=1).astype(np.float32)

    def execute_packed(self, batch: PackedBatch) -> LazyResult:
        terms = self._token_logits[batch.input_ids] * self._position_weights[batch.positions]
        sums = np.add.reduceat(terms, batch.cu_seqlens[:-1])
        self.batches.append((batch.num_seqs, batch.num_tokens))
        self.outputs.append(batch.num_outputs)
        self.num_eager_runs += 1
        return LazyResult(torch.from_numpy(self._rows(sums / np.diff(batch.cu_seqlens))), batch.num_outputs)

    def scores_of(self, query: str, documents: list[str], max_doc_tokens: int | None = None) -> np.ndarray:
        """[N, 2] (score, raw logit), one pair at a time."""
        seqs = self.pairs.encode(query, documents, max_doc_tokens).seqs
        logits = np.array([(self._token_logits[s] * self._position_weights[: len(s)]).mean() for s in seqs])
        return self._rows(logits)

    def num_tokens(self, query: str, documents: list[str]) -> int:
        return sum(len(s) for s in self.pairs.encode(query, documents).seqs)
