"""A fake classifier for the fast tier: the default model's tokenizer and pair tokenizer, three labels,
and logits that depend on every token of the input and its position, so that order, parts,
pairs and packing across requests are really checked.

Label j's logit is the mean over the input's tokens of a fixed per-token number for j scaled by a
per-position weight; the probabilities are the softmax (or sigmoid, as `function` says) of the
logits. `rows_of` computes the same numbers one input at a time, without packing, as the
reference a test compares the server with.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from rose_embed.engine.contract.batch import PackedBatch
from rose_embed.engine.model_files.classifier import Classifier
from rose_embed.engine.rose.lazy import LazyResult
from rose_embed.engine.text.pairs import PairTokenizer
from tests.support.fake_engine import FakeEngine

FAKE_CLASSIFIER = "rose-test/fake-classifier"
LABELS = ("negative", "neutral", "positive")


class FakeClassifier(FakeEngine):
    def __init__(self, name: str = FAKE_CLASSIFIER, function: str = "softmax", delay: float = 0.0):
        super().__init__(dim=2 * len(LABELS), name=name, delay=delay)
        self.spec = replace(self.spec, classifier=Classifier("bert_pooler", "cls", LABELS, function), pooling="cls",
                            normalize=False, embedding_dim=2 * len(LABELS), matryoshka_dims=())
        self.pairs = PairTokenizer(self.spec)
        rng = np.random.default_rng(11)
        # Second-type ids too: a pair's second text comes as id + vocab_size (engine/text/pairs.py).
        self._token_logits = rng.standard_normal((2 * self.vocab_size, len(LABELS)))
        self._position_weights = rng.uniform(0.5, 1.5, (self.spec.max_seq_len, 1))

    def _rows(self, logits: np.ndarray) -> np.ndarray:
        """[N, L] logits -> [N, 2L]: probabilities, then the logits."""
        if self.spec.classifier.function == "sigmoid":
            probs = 1 / (1 + np.exp(-logits))
        else:
            exp = np.exp(logits - logits.max(axis=1, keepdims=True))
            probs = exp / exp.sum(axis=1, keepdims=True)
        return np.concatenate([probs, logits], axis=1).astype(np.float32)

    def execute_packed(self, batch: PackedBatch) -> LazyResult:
        terms = self._token_logits[batch.input_ids] * self._position_weights[batch.positions]  # [T, L]
        sums = np.add.reduceat(terms, batch.cu_seqlens[:-1], axis=0)
        self.batches.append((batch.num_seqs, batch.num_tokens))
        self.outputs.append(batch.num_outputs)
        self.num_eager_runs += 1
        return LazyResult(torch.from_numpy(self._rows(sums / np.diff(batch.cu_seqlens)[:, None])), batch.num_outputs)

    def seqs_of(self, inputs: list[str | tuple[str, str]]) -> list[np.ndarray]:
        """Each input's sequence, one at a time: a text as the embedder's tokenizer cuts it, a pair as a
        cross-encoder's."""
        return [self.tokenize([one])[0] if isinstance(one, str) else self.pairs.encode(one[0], [one[1]]).seqs[0]
                for one in inputs]

    def rows_of(self, inputs: list[str | tuple[str, str]]) -> np.ndarray:
        """[N, 2L] (probabilities, logits), one input at a time."""
        seqs = self.seqs_of(inputs)
        logits = np.stack([(self._token_logits[s] * self._position_weights[: len(s)]).mean(axis=0) for s in seqs])
        return self._rows(logits)
