"""Token states -> a reranker's score per (query, document) pair, as the checkpoint's own head computes it.

The heads of engine/model_files/reranker.py: a cross-encoder's classifier head (bert_pooler,
roberta_head, modernbert_head: engine/rose/layers/classifier_layers.py) on its one label, or

  yes_no           the rows of "yes" and "no" of the LM head at the last token: logit(yes) - logit(no)

Like the sentence head (engine/rose/layers/head.py) it runs in float32 on the pooled [S, H]
states inside the model's CUDA graph. Each pair gives two numbers, [score, raw]: the logit after
the activation sentence-transformers' CrossEncoder.predict applies by default, and before it.
"""

from __future__ import annotations

import torch
from torch import nn

from rose_embed.engine.model_files.reranker import Reranker
from rose_embed.engine.rose.layers.classifier_layers import ClassifierLayers, checkpoint_tensor, required_tensor
from rose_embed.engine.rose.layers.pooling import pool_segments


class ScoreHead(nn.Module):
    """hidden [T, H], segment_ids [T] -> [num_segments, 2] float32: (score, raw logit) per pair."""

    def __init__(self, reranker: Reranker, state: dict[str, torch.Tensor], norm_eps: float = 1e-5):
        super().__init__()
        self.reranker = reranker
        self.activation = getattr(nn, reranker.activation)()
        if reranker.head == "yes_no":
            lm_head = checkpoint_tensor(state, "lm_head.weight")
            if lm_head is None:  # tied to the input embeddings
                lm_head = required_tensor(state, "embed_tokens.weight")
            # [2, H]: only the two rows the score reads, not the whole vocabulary's.
            self.register_buffer("yes_no", lm_head[[reranker.yes_id, reranker.no_id]].clone())
        else:
            self.classifier = ClassifierLayers(reranker.head, state, reranker.classifier_activation, norm_eps)

    def forward(self, hidden: torch.Tensor, segment_ids: torch.Tensor, num_segments: int) -> torch.Tensor:
        pooled = pool_segments(hidden, segment_ids, num_segments, self.reranker.pooling)  # [S, H] float32
        if self.reranker.head == "yes_no":
            logits = pooled @ self.yes_no.T  # [S, 2]
            raw = logits[:, 0] - logits[:, 1]
        else:
            raw = self.classifier(pooled)[:, 0]
        return torch.stack([self.activation(raw), raw], dim=1)
