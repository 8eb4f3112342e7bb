"""SigLIP's attention-pooling head (transformers' SiglipMultiheadAttentionPoolingHead): one learned
probe token attends to a sequence's states through torch's nn.MultiheadAttention (q, k, v in one
in_proj; 1/sqrt(head_dim) scale), then x + fc2(act(fc1(layernorm(x)))); one vector per sequence."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rose_embed.engine.rose.layers.vit_block import ACTIVATIONS


class AttentionPoolingHead(nn.Module):
    def __init__(self, hidden: int, intermediate: int, num_heads: int, eps: float, act: str):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, hidden // num_heads
        self.probe = nn.Parameter(torch.zeros(1, 1, hidden))
        self.in_proj = nn.Linear(hidden, 3 * hidden)  # nn.MultiheadAttention's in_proj_weight / in_proj_bias
        self.out_proj = nn.Linear(hidden, hidden)
        self.layernorm = nn.LayerNorm(hidden, eps=eps)
        self.fc1 = nn.Linear(hidden, intermediate)
        self.fc2 = nn.Linear(intermediate, hidden)
        self.act = ACTIVATIONS[act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [N, L, hidden] -> [N, hidden]."""
        n, length, hidden = x.shape
        (wq, wk, wv), (bq, bk, bv) = self.in_proj.weight.chunk(3), self.in_proj.bias.chunk(3)
        q = F.linear(self.probe, wq, bq).view(1, self.num_heads, 1, self.head_dim).expand(n, -1, -1, -1)
        k = F.linear(x, wk, bk).view(n, length, self.num_heads, self.head_dim).transpose(1, 2)
        v = F.linear(x, wv, bv).view(n, length, self.num_heads, self.head_dim).transpose(1, 2)
        pooled = self.out_proj(F.scaled_dot_product_attention(q, k, v).reshape(n, hidden))
        return pooled + self.fc2(self.act(self.fc1(self.layernorm(pooled))))

    def hf_tensors(self, state: dict[str, torch.Tensor], hf_prefix: str, prefix: str) -> dict[str, torch.Tensor]:
        """transformers' head tensors (under `hf_prefix`) as this module's (under `prefix`), popped from `state`."""
        ours = {f"{prefix}probe": state.pop(f"{hf_prefix}probe")}
        for kind in ("weight", "bias"):
            ours[f"{prefix}in_proj.{kind}"] = state.pop(f"{hf_prefix}attention.in_proj_{kind}")
            for name, hf_name in (("out_proj", "attention.out_proj"), ("layernorm", "layernorm"),
                                  ("fc1", "mlp.fc1"), ("fc2", "mlp.fc2")):
                ours[f"{prefix}{name}.{kind}"] = state.pop(f"{hf_prefix}{hf_name}.{kind}")
        return ours
