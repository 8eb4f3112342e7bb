"""Mistral (e5-mistral-7b-instruct and the embedders built on it): Qwen3's stack without q/k norms.

The decoder layers, rotary, fused projections and weight loading are engine/rose/models/qwen3.py's;
Mistral only drops the per-head q/k RMSNorm and may declare a causal sliding window for every
layer (`sliding_window`: a query sees itself and the window - 1 tokens before it, as Hugging
Face's mask `key > query - window` says). A window no sequence can outgrow (e5-mistral's 4096
at a 4096-token limit) is dropped by the engine, so every backend can run it.
"""

from __future__ import annotations

from rose_embed.engine.rose.models.qwen3 import Qwen3Model


class MistralModel(Qwen3Model):
    name, architecture = "Mistral", "mistral"

    def __init__(self, config: dict):
        window = config.get("sliding_window")
        super().__init__(config, qk_norm=False, window=(window - 1, 0) if window else None)
