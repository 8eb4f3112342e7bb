"""Token states -> BGE-M3's rows: the dense vector, the token vector and the lexical weight of each segment.

Each pooling segment's first token's state (CLS pooling) gives one row, engine/contract/m3_rows.py's
[normalize(state) | normalize(colbert_linear(state)) | relu(sparse_linear(state))], in float32. A
text asked for its dense vector only is one segment, and its row's dense part is the CLS token's; a
text asked for more has a segment per token, and its rows are every token's three parts. The head
computes the same three parts for any batch, so one CUDA graph per shape serves both layouts with no
host sync, and nothing but S rows of H + D + 1 floats leaves the device: the [T, V] sparse embedding
FlagEmbedding forms on the way is never built (the host takes each token id's largest weight).
"""

from __future__ import annotations

import torch
from torch import nn

from rose_embed.engine.model_files.bge_m3 import BgeM3Model
from rose_embed.engine.rose.layers.head import load_weights
from rose_embed.engine.rose.layers.pooling import normalize, pool_segments


class M3Head(nn.Module):
    """hidden [T, H], segment_ids [T] -> [num_segments, H + D + 1] float32; weights load on construction."""

    pooling = "cls"  # what the runner reads of a head

    def __init__(self, m3: BgeM3Model):
        super().__init__()
        self.colbert_linear = nn.Linear(m3.dense_dim, m3.colbert_dim)
        load_weights(self.colbert_linear, m3.colbert_weights)
        self.sparse_linear = nn.Linear(m3.dense_dim, 1)
        load_weights(self.sparse_linear, m3.sparse_weights)

    def forward(self, hidden: torch.Tensor, segment_ids: torch.Tensor, num_segments: int) -> torch.Tensor:
        states = pool_segments(hidden, segment_ids, num_segments, self.pooling)  # [S, H] float32
        return torch.cat([normalize(states), normalize(self.colbert_linear(states)),
                          torch.relu(self.sparse_linear(states))], dim=1)
