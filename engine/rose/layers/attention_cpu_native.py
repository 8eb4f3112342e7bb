"""CPU attention in one C kernel over the packed stream (layers/native/attention_bf16.c).

PyTorch's CPU attention spends most of an embedder's batch on per-call overhead: each
(sequence, head) pair is a few tiny matrix products, a few microseconds of library dispatch
each. The kernel runs every (sequence, key/value head) pair as one work item on the
stream's own rows (no padding, no gathering, no copies of q, k and v), in float32 softmax on
bf16 dot products (AVX512-BF16), over torch's OpenMP threads.

It serves bf16 on x86 CPUs with AVX512-BF16 and head sizes the kernel has an instance for;
everything else (float32, other CPUs, no C compiler) runs GroupedSDPABackend, and the start-up
log says which ran and why.
"""

from __future__ import annotations

import ctypes

import torch

from engine.rose.cpu_features import cpu_flags
from engine.rose.layers.attention import AttentionShape
from engine.rose.native_build import load_kernel

SOURCE = "attention_bf16.c"
ISA_FLAGS = ("-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512bf16", "-mfma")
_NEEDED_CPU_FLAGS = ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16", "fma")


class _Arguments(ctypes.Structure):
    _fields_ = [
        ("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p), ("out", ctypes.c_void_p),
        ("q_token_stride", ctypes.c_int64), ("q_head_stride", ctypes.c_int64),
        ("k_token_stride", ctypes.c_int64), ("k_head_stride", ctypes.c_int64),
        ("v_token_stride", ctypes.c_int64), ("v_head_stride", ctypes.c_int64),
        ("out_token_stride", ctypes.c_int64), ("out_head_stride", ctypes.c_int64),
        ("cu_seqlens", ctypes.c_void_p),
        ("num_seqs", ctypes.c_int32), ("num_heads", ctypes.c_int32), ("num_kv_heads", ctypes.c_int32),
        ("head_dim", ctypes.c_int32),
        ("scale", ctypes.c_float),
        ("is_causal", ctypes.c_int32),
        ("window_left", ctypes.c_int32), ("window_right", ctypes.c_int32),
        ("position_bias", ctypes.c_void_p),
        ("bias_radius", ctypes.c_int32),
    ]


def unavailable_reason(shape: AttentionShape, dtype: torch.dtype) -> str | None:
    """Why the kernel cannot serve this model here, or None when it can (building it if needed)."""
    if dtype != torch.bfloat16:
        return f"it computes bf16 only, and the model runs in {str(dtype).removeprefix('torch.')}"
    missing = [flag for flag in _NEEDED_CPU_FLAGS if flag not in cpu_flags()]
    if missing:
        return "this CPU lacks " + ", ".join(missing)
    built = load_kernel(SOURCE, ISA_FLAGS)
    if built.library is None:
        return built.reason
    if not built.library.rose_supported_head_dim(shape.head_dim):
        return f"it has no instance for head size {shape.head_dim}"
    return None


class NativeCPUAttentionBackend:
    name = "native"

    def __init__(self, shape: AttentionShape):
        reason = unavailable_reason(shape, torch.bfloat16)
        if reason is not None:
            raise ValueError(f"the native CPU attention cannot run here: {reason}")
        self.shape = shape
        self._library = load_kernel(SOURCE, ISA_FLAGS).library
        self._library.rose_attention_bf16.argtypes = [ctypes.POINTER(_Arguments), ctypes.c_int]
        self._library.rose_attention_bf16.restype = ctypes.c_int

    def prepare(self, cu_seqlens: torch.Tensor, cu_seqlens_host: list[int], max_seqlen: int) -> torch.Tensor:
        return torch.tensor(cu_seqlens_host, dtype=torch.int32)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: torch.Tensor, local: bool = False,
                position_bias: torch.Tensor | None = None) -> torch.Tensor:
        q, k, v = (x if x.stride(-1) == 1 else x.contiguous() for x in (q, k, v))
        if q.dtype != torch.bfloat16 or k.dtype != torch.bfloat16 or v.dtype != torch.bfloat16:
            raise TypeError("the native CPU attention takes bf16 q, k and v")
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
        window = self.shape.window if local else None
        bias = None
        if position_bias is not None:
            # The bias enters the scores as SDPA's float mask does: rounded to the model's dtype.
            bias = position_bias.to(q.dtype).float().contiguous()
        arguments = _Arguments(
            q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(),
            q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
            out.stride(0), out.stride(1),
            meta.data_ptr(), meta.numel() - 1,
            self.shape.num_heads, self.shape.num_kv_heads, self.shape.head_dim,
            self.shape.scale, int(self.shape.is_causal),
            -1 if window is None else window[0], -1 if window is None else window[1],
            None if bias is None else bias.data_ptr(), 0 if bias is None else (bias.shape[1] - 1) // 2,
        )
        status = self._library.rose_attention_bf16(ctypes.byref(arguments), torch.get_num_threads())
        if status != 0:
            raise MemoryError("the native CPU attention could not allocate its scratch memory")
        return out
