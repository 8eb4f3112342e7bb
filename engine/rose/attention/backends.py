"""Which attention backend runs a model: the one factory over the CPU and CUDA backends.

Kept apart from engine/rose/attention/ragged.py (the interface and the reference backend),
which the backends import: the factory imports them, so nothing imports in a circle.
"""

from __future__ import annotations

import logging

import torch

from rose_embed.engine.rose.attention.ragged import AttentionBackend, AttentionShape, SDPAPerSequenceBackend

logger = logging.getLogger(__name__)

CPU_BACKENDS = ("auto", "sdpa", "native")


def make_attention_backend(
    name: str, shape: AttentionShape, device: torch.device, dtype: torch.dtype = torch.float32
) -> AttentionBackend:
    """The backend called `name` ("auto" picks the best available for the device)."""
    if device.type == "cpu":
        return _cpu_attention_backend(name, shape, dtype)
    if device.type == "cuda":
        if name == "sdpa":  # exact but slow: kept as a reference for tests
            return SDPAPerSequenceBackend(shape)
        from rose_embed.engine.rose.attention.cuda import make_cuda_attention_backend

        return make_cuda_attention_backend(name, shape, device, dtype)
    raise ValueError(f"no attention backend {name!r} for device {device}")


def device_refusal(name: str, device: torch.device, dtype: torch.dtype) -> str | None:
    """Why the backend called `name` cannot run on `device` at `dtype`, whatever the model, or None
    where it may: what can be told before a model loads, so that the CLI refuses it up front. The
    rest (a head size without a kernel, a compiler that fails) the factory tells as it builds one."""
    if device.type == "cuda":
        from rose_embed.engine.rose.attention.cuda import cuda_refusal

        return cuda_refusal(name, dtype)
    if device.type != "cpu":
        return None
    if name not in CPU_BACKENDS:
        return f"attention backend {name!r} needs CUDA; on CPU 'native' and 'sdpa' run"
    if name == "native":
        from rose_embed.engine.rose.attention.cpu_native import NATIVE_REFUSAL, cpu_refusal

        if (refusal := cpu_refusal(dtype)) is not None:
            return NATIVE_REFUSAL.format(refusal)
    return None


def _cpu_attention_backend(name: str, shape: AttentionShape, dtype: torch.dtype) -> AttentionBackend:
    """"auto": the native kernel where it runs (bf16 on AVX512-BF16, float32 on AVX2), else grouped SDPA."""
    if name not in CPU_BACKENDS:
        raise ValueError(device_refusal(name, torch.device("cpu"), dtype))
    from rose_embed.engine.rose.attention.cpu import GroupedSDPABackend
    from rose_embed.engine.rose.attention.cpu_native import NativeCPUAttentionBackend

    if name == "sdpa":
        return GroupedSDPABackend(shape)
    try:
        backend = NativeCPUAttentionBackend(shape, dtype)  # says why where it cannot run
    except ValueError as refusal:
        if name == "native":
            raise
        logger.info("attention: grouped SDPA, not the native kernel: %s", refusal)
        return GroupedSDPABackend(shape)
    logger.info("attention: the native CPU kernel (%s)", str(dtype).removeprefix("torch."))
    return backend
