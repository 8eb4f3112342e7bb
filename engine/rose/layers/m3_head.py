"""Token states -> BGE-M3's rows: the dense vector or the token vector, and the lexical weight, of each segment.

Each pooling segment's first token's state (CLS pooling) gives one row, engine/contract/m3_rows.py's: a
text's first token (position 0) its dense vector normalize(state), every later token its token vector
normalize(colbert_linear(state)), each zero-padded to max(H, D), then relu(sparse_linear(state)), in
float32. A text asked for its dense vector only is one segment, whose token is the text's first, so its
row is the dense vector; a text asked for more has a segment per token, and its rows are its first
token's dense vector then every later token's token vector.

Which it is, is read on the device from the batch's positions, never on the host: the head computes both
vectors for every row and keeps one (torch.where), so one CUDA graph per shape serves any mix of the two
layouts with no host sync. Both are a few small matmuls on S rows, next to the model; what it saves is
the copy: nothing but S rows of max(H, D) + 1 floats leaves the device, and the [T, V] sparse embedding
FlagEmbedding forms on the way is never built (the host takes each token id's largest weight).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rose_embed.engine.model_files.bge_m3 import BgeM3Model
from rose_embed.engine.rose.layers.head import load_weights
from rose_embed.engine.rose.layers.pooling import normalize, pooled_token_rows


class M3Head(nn.Module):
    """hidden [T, H], segment_ids [T], positions [T] -> [num_segments, max(H, D) + 1] float32; weights load on
    construction."""

    pooling = "cls"  # what the runner reads of a head
    reads_positions = True  # the runner passes the batch's positions: a text's first token gives the dense vector

    def __init__(self, m3: BgeM3Model):
        super().__init__()
        # The wider of the two vectors: engine/contract/m3_rows.py's row_width less the weight's column.
        self.vector_width = max(m3.dense_dim, m3.colbert_dim)
        self.colbert_linear = nn.Linear(m3.dense_dim, m3.colbert_dim)
        load_weights(self.colbert_linear, m3.colbert_weights)
        self.sparse_linear = nn.Linear(m3.dense_dim, 1)
        load_weights(self.sparse_linear, m3.sparse_weights)

    def forward(self, hidden: torch.Tensor, segment_ids: torch.Tensor, num_segments: int,
                positions: torch.Tensor) -> torch.Tensor:
        tokens = pooled_token_rows(segment_ids, num_segments, self.pooling)  # [S]
        states = hidden[tokens].float()  # [S, H]
        is_first = (positions[tokens] == 0).unsqueeze(1)  # [S, 1]: the row of a text's first token
        dense = self._padded(normalize(states))
        colbert = self._padded(normalize(self.colbert_linear(states)))
        return torch.cat([torch.where(is_first, dense, colbert), torch.relu(self.sparse_linear(states))], dim=1)

    def _padded(self, vectors: torch.Tensor) -> torch.Tensor:
        return F.pad(vectors, (0, self.vector_width - vectors.shape[1]))
