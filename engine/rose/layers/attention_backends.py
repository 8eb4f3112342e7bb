"""Which attention backend runs a model: the one factory over the CPU and CUDA backends.

Kept apart from engine/rose/layers/attention.py (the interface and the reference backend),
which the backends import: the factory imports them, so nothing imports in a circle.
"""

from __future__ import annotations

import torch

from engine.rose.layers.attention import AttentionBackend, AttentionShape, SDPAPerSequenceBackend


def make_attention_backend(
    name: str, shape: AttentionShape, device: torch.device, dtype: torch.dtype = torch.float32
) -> AttentionBackend:
    """The backend called `name` ("auto" picks the best available for the device)."""
    if device.type == "cpu":
        if name not in ("auto", "sdpa"):
            raise ValueError(f"attention backend {name!r} needs CUDA; on CPU only 'sdpa' runs")
        from engine.rose.layers.attention_cpu import GroupedSDPABackend

        return GroupedSDPABackend(shape)
    if device.type == "cuda":
        if name == "sdpa":  # exact but slow: kept as a reference for tests
            return SDPAPerSequenceBackend(shape)
        from engine.rose.layers.attention_cuda import make_cuda_attention_backend

        return make_cuda_attention_backend(name, shape, device, dtype)
    raise ValueError(f"no attention backend {name!r} for device {device}")
