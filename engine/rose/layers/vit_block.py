"""The pre-norm transformer block of CLIP's and SigLIP's towers (and of ViTs after them): x + attn(ln1(x)), then
x + fc2(act(fc1(ln2(x)))), on any leading shape: a packed stream [T, H] or images [N, L, H]."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn


def quick_gelu(x: torch.Tensor) -> torch.Tensor:
    """OpenAI CLIP's activation, as transformers' QuickGELUActivation computes it."""
    return x * torch.sigmoid(1.702 * x)


# config.json hidden_act -> the function (engine/model_files/clip.py's CLIP_ACTIVATIONS).
ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "quick_gelu": quick_gelu,
    "gelu": F.gelu,
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
}

# q, k, v [..., heads, head_dim] -> the attention's output, same shape.
Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class PreNormBlock(nn.Module):
    def __init__(self, hidden: int, intermediate: int, num_heads: int, eps: float, act: str):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, hidden // num_heads
        self.layer_norm1 = nn.LayerNorm(hidden, eps=eps)
        self.qkv_proj = nn.Linear(hidden, 3 * hidden)  # q_proj, k_proj, v_proj fused
        self.out_proj = nn.Linear(hidden, hidden)
        self.layer_norm2 = nn.LayerNorm(hidden, eps=eps)
        self.fc1 = nn.Linear(hidden, intermediate)
        self.fc2 = nn.Linear(intermediate, hidden)
        self.act, self.act_name = ACTIVATIONS[act], act

    def forward(self, x: torch.Tensor, attend: Attend) -> torch.Tensor:
        lead = x.shape[:-1]
        q, k, v = self.qkv_proj(self.layer_norm1(x)).view(*lead, 3, self.num_heads, self.head_dim).unbind(-3)
        x = x + self.out_proj(attend(q, k, v).reshape(*lead, -1))
        return x + self.fc2(self.act(self.fc1(self.layer_norm2(x))))


def block_tensors(state: dict[str, torch.Tensor], hf_prefix: str, prefix: str) -> dict[str, torch.Tensor]:
    """One transformers CLIPEncoderLayer's tensors (under `hf_prefix`) as PreNormBlock's (under `prefix`),
    popped from `state`."""
    ours = {}
    for kind in ("weight", "bias"):
        ours[f"{prefix}qkv_proj.{kind}"] = torch.cat([state.pop(f"{hf_prefix}self_attn.{n}_proj.{kind}")
                                                      for n in ("q", "k", "v")])
        ours[f"{prefix}out_proj.{kind}"] = state.pop(f"{hf_prefix}self_attn.out_proj.{kind}")
        for name, hf_name in (("layer_norm1", "layer_norm1"), ("layer_norm2", "layer_norm2"),
                              ("fc1", "mlp.fc1"), ("fc2", "mlp.fc2")):
            ours[f"{prefix}{name}.{kind}"] = state.pop(f"{hf_prefix}{hf_name}.{kind}")
    return ours
