"""MPNet (all-mpnet-base-v2 and its fine-tunes): BERT's layers plus a relative position bias.

Every layer adds bias[head, bucket(key - query)] to its attention scores, one learned
table shared by all layers (Hugging Face's MPNetEncoder.relative_attention_bias). The
buckets depend only on the distance, so the loader expands the table once into one
column per distance (engine/rose/attention/ragged.py's relative_bias_rows layout) and the
attention backends add it exactly: the CPU path in its masks, CUDA in a Triton kernel.
Positions count from padding_idx + 1 = 2, as RoBERTa's do.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch
from torch import nn

from rose_embed.engine.rose.attention.ragged import AttentionShape
from rose_embed.engine.rose.models.bert import BertModel, as_bert_names

# Hugging Face's MPNetEncoder.compute_position_bias buckets with these, whatever the config says.
_NUM_BUCKETS, _MAX_DISTANCE = 32, 128
_PADDING_IDX = 1
# MPNet tensor name (inside encoder.layer.N.) -> BERT's.
_LAYER_NAMES = {
    "attention.attn.q": "attention.self.query",
    "attention.attn.k": "attention.self.key",
    "attention.attn.v": "attention.self.value",
    "attention.attn.o": "attention.output.dense",
    "attention.LayerNorm": "attention.output.LayerNorm",
}


def relative_position_bucket(relative_position: torch.Tensor) -> torch.Tensor:
    """MPNetEncoder.relative_position_bucket, operation for operation (float32 logs included),
    so that every distance lands in the bucket the reference gives it."""
    num_buckets = _NUM_BUCKETS // 2
    n = -relative_position
    ret = (n < 0).to(torch.long) * num_buckets
    n = torch.abs(n)
    max_exact = num_buckets // 2
    is_small = n < max_exact
    val_if_large = max_exact + (
        torch.log(n.float() / max_exact) / math.log(_MAX_DISTANCE / max_exact) * (num_buckets - max_exact)
    ).to(torch.long)
    val_if_large = torch.min(val_if_large, torch.full_like(val_if_large, num_buckets - 1))
    return ret + torch.where(is_small, n, val_if_large)


class MPNetModel(BertModel):
    def __init__(self, config: dict):
        super().__init__({**config, "type_vocab_size": 0}, position_offset=_PADDING_IDX + 1)
        # One column per distance key - query in [-R, R], R covering the longest sequence.
        radius = config["max_position_embeddings"] - 1
        self.relative_bias = nn.Parameter(torch.zeros(self.num_heads, 2 * radius + 1))

    def attention_shape(self, is_causal: bool) -> AttentionShape:
        return replace(super().attention_shape(is_causal), has_position_bias=True)

    def _renamed(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        bert_names = as_bert_names(state, "mpnet.", "encoder.layer.", _LAYER_NAMES)
        renamed = super()._renamed(bert_names)
        buckets = bert_names["encoder.relative_attention_bias.weight"]  # [num_buckets, heads]
        if buckets.shape[0] < _NUM_BUCKETS:
            raise ValueError(f"MPNet needs {_NUM_BUCKETS} relative-attention buckets; this one has {buckets.shape[0]}")
        radius = (self.relative_bias.shape[1] - 1) // 2
        distances = torch.arange(-radius, radius + 1)
        renamed["relative_bias"] = buckets[relative_position_bucket(distances)].t().contiguous()
        return renamed
