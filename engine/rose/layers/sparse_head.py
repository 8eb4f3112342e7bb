"""Token states -> a sparse encoder's answer rows: the MLM head, SPLADE pooling and the top-k, on the device.

What sentence-transformers' SpladePooling computes (engine/model_files/sparse.py), per text:

    vector[v] = pool over the text's tokens t of  log1p(relu(logit[t, v]))     (log1p twice: log1p_relu)

max or sum pooled. Max pooling pools the raw logits (from 0, which is the relu) and activates the
pooled [S, V] once: log1p is increasing, so log1p(max x) is max log1p(x), and the activation runs on
S rows instead of T. On CUDA the max is one Triton pass over the logits as the MLM head gives them
(engine/rose/layers/fused.py's segment_maxes_into): a float32 copy of them and torch's atomic max, a
compare-and-swap loop per element, cost more than the MLM head's matrix product. Sum pooling
activates each token's logits, then adds them up per text.

The [T, V] logits are the costly tensor (a whole batch's tokens times the vocabulary): they are
computed a chunk of tokens at a time and pooled into [S, V] at once, so at most one chunk's
logits exist. The MLM head's decoder is padded to an aligned width (engine/rose/layers/mlm_head.py),
and the padding's columns are never read. Then, still in the graph, each text's non-zeros are
counted and written as engine/contract/sparse_rows.py lays them out: [S, 1 + 2K] float32. With a
model's top-k, its largest K values and their token ids (torch.topk); without one, K is only a cap
that a text's non-zeros stay far below, so no sort is needed: each non-zero's slot is the running
count of the non-zeros before it in its row (a cumsum), and one scatter writes the pairs in
ascending id order (topk with K in the thousands, a sort, cost more than the MLM head's product).
Only those rows are copied to the host, never the [S, V] vectors, let alone the logits. Every
shape here follows from the batch's padded shape (tokens, segments) and the model (V, K), and
nothing waits on the device, so the head is captured in the model's CUDA graph like the sentence
head.

The variable-length answer: K is fixed per model, so the rows are fixed-width; the count says how
many of a row's slots hold non-zeros, and whether the text had more than fit (only where K is a
cap, not the model's top-k: the front end refuses such a text rather than cut it). This follows
TEI's SPLADE head (the MLM head's logits, log1p(relu), max over the tokens:
backends/candle/src/models/bert.rs, BertSpladeHead), which hands the whole [V] vector to its router
to drop the zeros; vLLM's SPLADESparsePooler (vllm/model_executor/models/bert.py) likewise returns
[V] per text. Both copy V floats per text to the host; this head copies 1 + 2K.
"""

from __future__ import annotations

import torch
from torch import nn

from rose_embed.engine.model_files.sparse import SparseModel
from rose_embed.engine.rose.layers import fused
from rose_embed.engine.rose.layers.mlm_head import MLMHead

# Elements of one chunk's logits [tokens, V]: 128 MiB as float32, whatever the vocabulary.
_CHUNK_ELEMENTS = 2**25
_MIN_CHUNK_TOKENS = 64


class SparseHead(nn.Module):
    """hidden [T, H], segment_ids [T] -> rows [num_segments, 1 + 2K] float32. The MLM head runs in `dtype`
    (the model's), the pooling and what follows in float32."""

    def __init__(self, sparse: SparseModel, hf_config: dict, state: dict[str, torch.Tensor],
                 dtype: torch.dtype = torch.float32):
        super().__init__()
        self.sparse = sparse
        self.mlm = MLMHead(sparse.mlm_head, hf_config, state).to(dtype)
        if self.mlm.vocab_size != sparse.vocab_size:
            raise ValueError(f"the MLM head gives {self.mlm.vocab_size} logits, but config.json's vocab_size is "
                             f"{sparse.vocab_size}")
        self.num_slots = sparse.num_slots
        self.chunk_tokens = max(_MIN_CHUNK_TOKENS, _CHUNK_ELEMENTS // sparse.vocab_size)

    def forward(self, hidden: torch.Tensor, segment_ids: torch.Tensor, num_segments: int) -> torch.Tensor:
        return self._rows(self.vectors(hidden, segment_ids, num_segments))

    def vectors(self, hidden: torch.Tensor, segment_ids: torch.Tensor, num_segments: int) -> torch.Tensor:
        """Each segment's sparse vector, dense on the device: [num_segments, V] float32."""
        is_max = self.sparse.pooling == "max"
        # Padding tokens (segment id -1) pool into one spare row past the segments, dropped at the end.
        rows = torch.where(segment_ids < 0, num_segments, segment_ids).long()
        pooled = torch.zeros((num_segments + 1, self.sparse.vocab_size), dtype=torch.float32, device=hidden.device)
        dtype = self.mlm.decoder.weight.dtype
        for start in range(0, hidden.shape[0], self.chunk_tokens):
            stop = start + self.chunk_tokens
            logits = self.mlm(hidden[start:stop].to(dtype))[:, : self.sparse.vocab_size]  # [chunk, V]
            if is_max:
                fused.segment_maxes_into(pooled, logits, rows[start:stop])  # from 0, which is the relu
            else:
                pooled.index_add_(0, rows[start:stop], self._activate(logits.float().relu_()))
        pooled = pooled[:num_segments]
        return self._activate(pooled) if is_max else pooled

    def _activate(self, x: torch.Tensor) -> torch.Tensor:
        """log1p of x >= 0 (twice for log1p_relu), in place."""
        x = x.log1p_()
        return x.log1p_() if self.sparse.activation == "log1p_relu" else x

    def _rows(self, vectors: torch.Tensor) -> torch.Tensor:
        if self.sparse.max_active_dims is not None:
            count = (vectors > 0).sum(dim=1, keepdim=True).to(torch.float32)
            values, indices = torch.topk(vectors, self.num_slots, dim=1, sorted=True)
            return torch.cat([count, indices.to(torch.float32), values], dim=1)
        return self._compacted_rows(vectors)

    def _compacted_rows(self, vectors: torch.Tensor) -> torch.Tensor:
        """Each row's first K non-zeros in id order, without a sort: slot = non-zeros before it."""
        num_rows, k = vectors.shape[0], self.num_slots
        nonzero = vectors > 0
        slot = nonzero.cumsum(dim=1) - 1
        count = (slot[:, -1:] + 1).to(torch.float32)
        slot = torch.where(nonzero & (slot < k), slot, k)  # slot k: a spare past the row's K, dropped
        ids = torch.arange(vectors.shape[1], device=vectors.device, dtype=torch.float32).expand(num_rows, -1)
        pairs = torch.zeros((2, num_rows, k + 1), dtype=torch.float32, device=vectors.device)
        pairs[0].scatter_(1, slot, ids)
        pairs[1].scatter_(1, slot, vectors)
        return torch.cat([count, pairs[0, :, :k], pairs[1, :, :k]], dim=1)
