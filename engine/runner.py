"""ModelRunner: a packed batch -> device -> model -> pooled (normalised) vectors."""

from __future__ import annotations

import torch

from engine.batch import PackedBatch
from engine.layers.attention import AttentionBackend
from engine.layers.pooling import normalize, pool
from engine.lazy import LazyResult
from engine.loader import ModelSpec


class ModelRunner:
    """Runs one batch at a time; call it from one thread only (the engine thread)."""

    def __init__(self, model: torch.nn.Module, spec: ModelSpec, attention: AttentionBackend, device: torch.device):
        self.model, self.spec, self.attention, self.device = model, spec, attention, device

    @torch.inference_mode()
    def execute(self, batch: PackedBatch) -> LazyResult:
        input_ids = torch.from_numpy(batch.input_ids).to(self.device, non_blocking=True)
        positions = torch.from_numpy(batch.positions).to(self.device, non_blocking=True)
        cu_seqlens = torch.from_numpy(batch.cu_seqlens).to(self.device, non_blocking=True)
        meta = self.attention.prepare(cu_seqlens, batch.cu_seqlens.tolist(), batch.max_seqlen)
        hidden = self.model(input_ids, positions, self.attention, meta)
        vectors = pool(hidden, cu_seqlens, self.spec.pooling)
        if self.spec.normalize:
            vectors = normalize(vectors)
        return LazyResult(vectors, batch.num_seqs)
