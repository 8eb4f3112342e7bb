"""Token states -> a classifier's probabilities and raw logits per input, as transformers computes them.

The checkpoint's own classifier head (engine/rose/layers/classifier_layers.py) on the pooled
state, then the function engine/model_files/classifier.py read from config.json: a softmax over
the labels, a sigmoid per label, or none. Like the other heads it runs in float32 on the pooled
[S, H] states inside the model's CUDA graph.
"""

from __future__ import annotations

import torch
from torch import nn

from rose_embed.engine.model_files.classifier import Classifier
from rose_embed.engine.rose.layers.classifier_layers import ClassifierLayers
from rose_embed.engine.rose.layers.pooling import pool_segments


class LabelHead(nn.Module):
    """hidden [T, H], segment_ids [T] -> [num_segments, 2 * num_labels] float32: each input's
    probabilities, then its raw logits."""

    def __init__(self, classifier: Classifier, state: dict[str, torch.Tensor], norm_eps: float = 1e-5):
        super().__init__()
        self.pooling, self.function = classifier.pooling, classifier.function
        self.classifier = ClassifierLayers(classifier.head, state, classifier.classifier_activation, norm_eps)
        if self.classifier.out.out_features != classifier.num_labels:
            raise ValueError(f"config.json names {classifier.num_labels} labels, but the checkpoint's classifier "
                             f"gives {self.classifier.out.out_features}")

    def forward(self, hidden: torch.Tensor, segment_ids: torch.Tensor, num_segments: int) -> torch.Tensor:
        pooled = pool_segments(hidden, segment_ids, num_segments, self.pooling)  # [S, H] float32
        logits = self.classifier(pooled)  # [S, L]
        if self.function == "softmax":
            probs = torch.softmax(logits, dim=1)
        elif self.function == "sigmoid":
            probs = torch.sigmoid(logits)
        else:
            probs = logits
        return torch.cat([probs, logits], dim=1)
