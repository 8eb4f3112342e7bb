"""RMSNorm, computed in float32 whatever the weights' dtype (as Hugging Face's Qwen3RMSNorm does)."""

from __future__ import annotations

import torch
from torch import nn


class RMSNorm(nn.Module):
    """x / rms(x) * weight over the last dimension.

    Used on [T, hidden] and, for Qwen3's per-head q_norm / k_norm, on [T, heads, head_dim].
    The reduction runs in float32 so that bf16 activations lose no precision in the mean
    of squares; the result is cast back before the weight multiplies it, matching the
    reference order of operations bit for bit in fp32 and closely in bf16.
    """

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        input_dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * x.to(input_dtype)
