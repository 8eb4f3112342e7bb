"""CPU attention in one C kernel over the packed stream (native/attention_*.c).

PyTorch's CPU attention spends most of an embedder's batch on per-call overhead: each
(sequence, head) pair is a few tiny matrix products, a few microseconds of library dispatch
each. The kernels run every (sequence, key/value head) pair as one work item on the
stream's own rows (no padding, no gathering, no copies of q, k and v), over torch's OpenMP
threads: bf16 models on AVX512-BF16's dot products, float32 models on AVX2 and FMA.

Elsewhere (other CPUs, float16, a head size without an instance, no C compiler) the engine runs
GroupedSDPABackend, and the start-up log says which ran and why.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np
import torch

from rose_embed.engine.rose.cpu_features import cpu_flags
from rose_embed.engine.rose.attention.ragged import AttentionShape
from rose_embed.engine.rose.attention.native_build import load_kernel


@dataclass(frozen=True)
class _Kernel:
    source: str
    function: str
    isa_flags: tuple[str, ...]  # the compiler's
    cpu_flags: tuple[str, ...]  # /proc/cpuinfo's names of the same


KERNELS = {
    torch.bfloat16: _Kernel("attention_bf16.c", "rose_attention_bf16",
                            ("-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512bf16", "-mfma"),
                            ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16", "fma")),
    torch.float32: _Kernel("attention_f32.c", "rose_attention_f32", ("-mavx2", "-mfma"), ("avx2", "fma")),
}


NATIVE_REFUSAL = "the native CPU attention cannot run here: {}"


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
        ("num_keys", ctypes.c_void_p),
    ]


def cpu_refusal(dtype: torch.dtype) -> str | None:
    """Why no kernel computes `dtype` on this CPU, whatever the model, or None when one may."""
    kernel = KERNELS.get(dtype)
    if kernel is None:
        return f"it computes bf16 and float32, and the model runs in {str(dtype).removeprefix('torch.')}"
    missing = [flag for flag in kernel.cpu_flags if flag not in cpu_flags()]
    if missing:
        return f"its {str(dtype).removeprefix('torch.')} kernel needs " + ", ".join(missing) + ", which this CPU lacks"
    return None


def unavailable_reason(shape: AttentionShape, dtype: torch.dtype) -> str | None:
    """Why no kernel can serve this model here, or None when one can (building it if needed)."""
    if (refusal := cpu_refusal(dtype)) is not None:
        return refusal
    kernel = KERNELS[dtype]
    built = load_kernel(kernel.source, kernel.isa_flags)
    if built.library is None:
        return built.reason
    if not built.library.rose_supported_head_dim(shape.head_dim):
        return f"it has no instance for head size {shape.head_dim}"
    return None


@dataclass(frozen=True)
class NativeMeta:
    cu_seqlens: torch.Tensor  # [B+1] int32
    num_keys: torch.Tensor | None  # [B] int32: each sequence's keys, its first tokens; None: all


class NativeCPUAttentionBackend:
    name = "native"
    takes_num_keys = True

    def __init__(self, shape: AttentionShape, dtype: torch.dtype = torch.bfloat16):
        reason = unavailable_reason(shape, dtype)
        if reason is not None:
            raise ValueError(NATIVE_REFUSAL.format(reason))
        self.shape = shape
        self.dtype = dtype
        kernel = KERNELS[dtype]
        self._run = getattr(load_kernel(kernel.source, kernel.isa_flags).library, kernel.function)
        self._run.argtypes = [ctypes.POINTER(_Arguments), ctypes.c_int]
        self._run.restype = ctypes.c_int

    def prepare(self, cu_seqlens: torch.Tensor, cu_seqlens_host: list[int], max_seqlen: int,
                num_keys: np.ndarray | None = None) -> NativeMeta:
        keys = None if num_keys is None else torch.from_numpy(np.ascontiguousarray(num_keys, dtype=np.int32))
        return NativeMeta(torch.tensor(cu_seqlens_host, dtype=torch.int32), keys)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: NativeMeta, local: bool = False,
                position_bias: torch.Tensor | None = None) -> torch.Tensor:
        q, k, v = (x if x.stride(-1) == 1 else x.contiguous() for x in (q, k, v))
        if not q.dtype == k.dtype == v.dtype == self.dtype:
            raise TypeError(f"this native CPU attention takes {self.dtype} q, k and v")
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
            meta.cu_seqlens.data_ptr(), meta.cu_seqlens.numel() - 1,
            self.shape.num_heads, self.shape.num_kv_heads, self.shape.head_dim,
            self.shape.scale, int(self.shape.is_causal),
            -1 if window is None else window[0], -1 if window is None else window[1],
            None if bias is None else bias.data_ptr(), 0 if bias is None else (bias.shape[1] - 1) // 2,
            None if meta.num_keys is None else meta.num_keys.data_ptr(),
        )
        status = self._run(ctypes.byref(arguments), torch.get_num_threads())
        if status != 0:
            raise MemoryError("the native CPU attention could not allocate its scratch memory")
        return out
