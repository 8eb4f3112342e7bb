"""cuBLASLt's FP8 GEMM with an epilogue, called through ctypes: the GEMM that applies the
BERT family's up-projection bias and GELU to its float32 accumulator and writes e4m3 at a given
scale, the down projection's input, with no bf16 output and no pass of its own.

torch._scaled_mm exposes neither the epilogue nor an e4m3 output with rowwise scales. cuBLASLt
ships with torch's CUDA build (libcublasLt), so this needs no compiler: the GEMM is described
once per shape (its descriptors and the algorithm cuBLASLt's heuristic picks) and launched on
torch's current stream, so it is captured in CUDA graphs like any other kernel.

The engine calls it for the BERT family's up projection at one scale per operand
(fp8_fused.linear_activation_rows): on the H100 (torch 2.11, CUDA 13) cuBLASLt's heuristic serves
the fused GELU with e4m3 out at one scale per operand but no e4m3 output with rowwise scales
(bench/probes/fp8_cublaslt.py, bench/results/fp8/README.md). Where it serves no algorithm, scaled_matmul returns None
and the caller runs its own steps.

Layouts: torch's row-major x [M, K] and weight [N, K] are, read column-major, x^T [K, M] and
weight^T [K, N]; the product out^T [N, M] = weight (transposed) times x^T is, read back
row-major, out [M, N] = x @ weight.T. So cuBLASLt's "A" is the weight (with one scale per output
channel) and its "B" the activation (one scale per token), the transposed-A layout FP8 needs.

The enum values are cublasLt.h's (CUDA 12.9 and 13), fixed by its ABI.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import os
from dataclasses import dataclass

import torch

# cudaDataType_t
_CUDA_R_32F = 0
_CUDA_R_16BF = 14
_CUDA_R_8F_E4M3 = 28
_CUBLAS_COMPUTE_32F = 68
_CUBLAS_OP_N, _CUBLAS_OP_T = 0, 1
# cublasLtMatmulDescAttributes_t
_DESC_TRANSA = 3
_DESC_TRANSB = 4
_DESC_EPILOGUE = 7
_DESC_BIAS_POINTER = 8
_DESC_A_SCALE_POINTER = 17
_DESC_B_SCALE_POINTER = 18
_DESC_D_SCALE_POINTER = 20
_DESC_FAST_ACCUM = 25
_DESC_BIAS_DATA_TYPE = 26
_DESC_A_SCALE_MODE = 31
_DESC_B_SCALE_MODE = 32
_SCALE_OUTER_VEC_32F = 3  # cublasLtMatmulMatrixScale_t: one float32 per row of A and per column of B
_PREF_MAX_WORKSPACE_BYTES = 1
EPILOGUE_BIAS = 4  # cublasLtEpilogue_t's bias bit
WORKSPACE_BYTES = 32 << 20  # what cuBLAS asks for on Hopper


class CublasLtError(RuntimeError):
    """A cuBLASLt call that failed."""


class _HeuristicResult(ctypes.Structure):
    _fields_ = [("algo", ctypes.c_uint64 * 8), ("workspace_size", ctypes.c_size_t), ("state", ctypes.c_int),
                ("waves_count", ctypes.c_float), ("reserved", ctypes.c_int * 4)]


@functools.cache
def _library() -> ctypes.CDLL | None:
    """libcublasLt as torch loaded it (its soname resolves to the loaded copy), else from the
    nvidia wheels beside torch, else wherever the loader finds it; None where there is none."""
    candidates = ["libcublasLt.so.13", "libcublasLt.so.12"]
    try:
        import nvidia

        for root in nvidia.__path__:
            candidates += sorted(glob.glob(os.path.join(root, "*", "lib", "libcublasLt.so.*")))
    except ImportError:
        pass
    found = ctypes.util.find_library("cublasLt")
    if found:
        candidates.append(found)
    for name in candidates:
        try:
            return _declare(ctypes.CDLL(name))
        except (OSError, AttributeError):  # not there, or too old to have these entry points
            continue
    return None


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    p, i, u64, i64, size = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64, ctypes.c_int64, ctypes.c_size_t
    signatures = {
        "cublasLtCreate": [ctypes.POINTER(p)],
        "cublasLtMatmulDescCreate": [ctypes.POINTER(p), i, i],
        "cublasLtMatmulDescSetAttribute": [p, i, p, size],
        "cublasLtMatrixLayoutCreate": [ctypes.POINTER(p), i, u64, u64, i64],
        "cublasLtMatmulPreferenceCreate": [ctypes.POINTER(p)],
        "cublasLtMatmulPreferenceSetAttribute": [p, i, p, size],
        "cublasLtMatmulAlgoGetHeuristic": [p, p, p, p, p, p, p, i, ctypes.POINTER(_HeuristicResult),
                                           ctypes.POINTER(i)],
        "cublasLtMatmul": [p, p, p, p, p, p, p, p, p, p, p, p, p, p, size, p],
        "cublasLtMatmulPreferenceDestroy": [p],
        "cublasLtMatmulDescDestroy": [p],
        "cublasLtMatrixLayoutDestroy": [p],
    }
    for name, argtypes in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = argtypes, ctypes.c_int
    return lib


def _check(status: int, call: str) -> None:
    if status != 0:
        raise CublasLtError(f"{call} returned cublasStatus {status}")


def _set(desc, attribute: int, value) -> None:
    _check(_library().cublasLtMatmulDescSetAttribute(desc, attribute, ctypes.byref(value), ctypes.sizeof(value)),
           "cublasLtMatmulDescSetAttribute")


@functools.cache
def _handle(device_index: int) -> ctypes.c_void_p:
    handle = ctypes.c_void_p()
    with torch.cuda.device(device_index):
        _check(_library().cublasLtCreate(ctypes.byref(handle)), "cublasLtCreate")
    return handle


@functools.cache
def _workspace(device_index: int) -> torch.Tensor:
    return torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=f"cuda:{device_index}")


@functools.cache
def _unread_c(device_index: int) -> torch.Tensor:
    """The C operand's address: never read (beta is 0), but cuBLASLt takes neither a null one nor D's."""
    return torch.empty(256, dtype=torch.uint8, device=f"cuda:{device_index}")


def _layout(dtype: int, rows: int, cols: int, leading: int) -> ctypes.c_void_p:
    layout = ctypes.c_void_p()
    _check(_library().cublasLtMatrixLayoutCreate(ctypes.byref(layout), dtype, rows, cols, leading),
           "cublasLtMatrixLayoutCreate")
    return layout


@dataclass
class _Plan:
    desc: ctypes.c_void_p
    layouts: tuple  # A, B, C, D
    algo: _HeuristicResult
    workspace_bytes: int


_OUT_TYPES = {torch.bfloat16: _CUDA_R_16BF, torch.float8_e4m3fn: _CUDA_R_8F_E4M3}


@functools.cache
def _plan(device_index: int, m: int, n: int, k: int, epilogue: int, out_dtype: torch.dtype,
          fast_accumulation: bool, rowwise: bool, workspace_bytes: int = WORKSPACE_BYTES,
          rank: int = 0) -> _Plan | None:
    """The descriptors and algorithm of out [m, n] = epilogue(x [m, k] @ weight [n, k].T), made once
    per shape (host work only; the pointers are set at each call): the heuristic's `rank`-th choice
    (0: its best) within `workspace_bytes`; None where cuBLASLt is missing or has no such algorithm."""
    lib = _library()
    if lib is None:
        return None
    desc = ctypes.c_void_p()
    _check(lib.cublasLtMatmulDescCreate(ctypes.byref(desc), _CUBLAS_COMPUTE_32F, _CUDA_R_32F),
           "cublasLtMatmulDescCreate")
    _set(desc, _DESC_TRANSA, ctypes.c_int32(_CUBLAS_OP_T))
    _set(desc, _DESC_TRANSB, ctypes.c_int32(_CUBLAS_OP_N))
    _set(desc, _DESC_EPILOGUE, ctypes.c_uint32(epilogue))
    if epilogue & EPILOGUE_BIAS:
        _set(desc, _DESC_BIAS_DATA_TYPE, ctypes.c_int32(_CUDA_R_16BF))
    if rowwise:
        _set(desc, _DESC_A_SCALE_MODE, ctypes.c_int32(_SCALE_OUTER_VEC_32F))
        _set(desc, _DESC_B_SCALE_MODE, ctypes.c_int32(_SCALE_OUTER_VEC_32F))
    _set(desc, _DESC_FAST_ACCUM, ctypes.c_int8(1 if fast_accumulation else 0))
    # Without its scales' (and bias's) addresses set, the heuristic serves no rowwise algorithm:
    # device addresses stand in for those each call sets.
    placeholder = ctypes.c_void_p(_unread_c(device_index).data_ptr())
    for attribute in (_DESC_A_SCALE_POINTER, _DESC_B_SCALE_POINTER):
        _set(desc, attribute, placeholder)
    if epilogue & EPILOGUE_BIAS:
        _set(desc, _DESC_BIAS_POINTER, placeholder)
    if out_dtype == torch.float8_e4m3fn:
        _set(desc, _DESC_D_SCALE_POINTER, placeholder)
    layouts = (_layout(_CUDA_R_8F_E4M3, k, n, k), _layout(_CUDA_R_8F_E4M3, k, m, k),
               _layout(_CUDA_R_16BF, n, m, n), _layout(_OUT_TYPES[out_dtype], n, m, n))
    results = _heuristic(lib, device_index, desc, layouts, rank + 1, workspace_bytes)
    if len(results) <= rank:  # a combination this cuBLASLt or GPU does not serve
        for layout in layouts:
            lib.cublasLtMatrixLayoutDestroy(layout)
        lib.cublasLtMatmulDescDestroy(desc)
        return None
    return _Plan(desc, layouts, results[rank], workspace_bytes)


def _heuristic(lib: ctypes.CDLL, device_index: int, desc, layouts: tuple, count: int = 1,
               workspace_bytes: int = WORKSPACE_BYTES) -> list[_HeuristicResult]:
    """cuBLASLt's best `count` algorithms for the plan within `workspace_bytes`, best first (none
    where it serves none), its preference object freed once asked (the plan keeps only the algorithm)."""
    preference = ctypes.c_void_p()
    _check(lib.cublasLtMatmulPreferenceCreate(ctypes.byref(preference)), "cublasLtMatmulPreferenceCreate")
    try:
        workspace = ctypes.c_uint64(workspace_bytes)
        _check(lib.cublasLtMatmulPreferenceSetAttribute(preference, _PREF_MAX_WORKSPACE_BYTES,
                                                        ctypes.byref(workspace), ctypes.sizeof(workspace)),
               "cublasLtMatmulPreferenceSetAttribute")
        results, returned = (_HeuristicResult * count)(), ctypes.c_int(0)
        status = lib.cublasLtMatmulAlgoGetHeuristic(_handle(device_index), desc, *layouts, preference, count,
                                                    results, ctypes.byref(returned))
        return list(results[:returned.value]) if status == 0 else []
    finally:
        lib.cublasLtMatmulPreferenceDestroy(preference)


def workspace_limits(workspace_free: bool) -> tuple[int, ...]:
    """scaled_matmul's workspace_limits: an algorithm that needs none first where `workspace_free`,
    else cuBLASLt's best within WORKSPACE_BYTES alone."""
    return (0, WORKSPACE_BYTES) if workspace_free else (WORKSPACE_BYTES,)


# cublasLtEpilogue_t by the activation it applies, its bits or'ed with EPILOGUE_BIAS for a bias;
# with neither, CUBLASLT_EPILOGUE_DEFAULT (1).
EPILOGUES = {None: 0, "relu": 2, "gelu_tanh": 32}


def scaled_matmul(x: torch.Tensor, x_scales: torch.Tensor, weight: torch.Tensor, weight_scales: torch.Tensor,
                  bias: torch.Tensor | None, activation: str | None, out_dtype: torch.dtype,
                  out_scale_inverse: torch.Tensor | None, fast_accumulation: bool,
                  rowwise: bool = True, workspace_limits: tuple[int, ...] = (0, WORKSPACE_BYTES),
                  rank: int = 0) -> torch.Tensor | None:
    """act((x * x_scales) @ (weight * weight_scales.T).T + bias) [M, N] in out_dtype, act one of
    EPILOGUES (None: none), applied to the float32 accumulator; None where cuBLASLt has no
    algorithm for it (the caller runs its own steps instead).

    x [M, K] and weight [N, K] e4m3, contiguous; x_scales [M, 1], weight_scales [1, N] float32,
    contiguous; bias [N] bf16. An e4m3 output is the activated result times out_scale_inverse (a
    float32 scalar on the device, 1 / the output's scale), rounded to nearest (a scale that bounds
    the output keeps it within e4m3's range). With `rowwise` off, x_scales and weight_scales are
    one float each.

    The algorithm is the heuristic's `rank`-th (0: its best) within the first of
    `workspace_limits` that has one. cuBLASLt clears part of its workspace before each GEMM whose
    algorithm uses some, a memset that in a CUDA graph is a node of its own, waited on; its best
    algorithm within no workspace at all needs none (bench/probes/fp8_gemm_algos.py measures both)."""
    m, k = x.shape
    n = weight.shape[0]
    device_index = x.device.index if x.device.index is not None else torch.cuda.current_device()
    epilogue = (EPILOGUES[activation] | (EPILOGUE_BIAS if bias is not None else 0)) or 1
    if not m or out_dtype not in _OUT_TYPES:
        return None
    plan = next((plan for limit in workspace_limits
                 if (plan := _plan(device_index, m, n, k, epilogue, out_dtype, fast_accumulation, rowwise, limit, rank))
                 is not None), None)
    if plan is None:
        return None
    out = torch.empty(m, n, dtype=out_dtype, device=x.device)
    _set(plan.desc, _DESC_A_SCALE_POINTER, ctypes.c_void_p(weight_scales.data_ptr()))
    _set(plan.desc, _DESC_B_SCALE_POINTER, ctypes.c_void_p(x_scales.data_ptr()))
    _set(plan.desc, _DESC_BIAS_POINTER, ctypes.c_void_p(bias.data_ptr() if bias is not None else 0))
    _set(plan.desc, _DESC_D_SCALE_POINTER,
         ctypes.c_void_p(out_scale_inverse.data_ptr() if out_scale_inverse is not None else 0))
    alpha, beta = ctypes.c_float(1.0), ctypes.c_float(0.0)
    a_layout, b_layout, c_layout, d_layout = plan.layouts
    _check(_library().cublasLtMatmul(
        _handle(device_index), plan.desc, ctypes.byref(alpha), weight.data_ptr(), a_layout, x.data_ptr(), b_layout,
        ctypes.byref(beta), _unread_c(device_index).data_ptr(), c_layout, out.data_ptr(), d_layout,
        ctypes.byref(plan.algo.algo), _workspace(device_index).data_ptr() if plan.workspace_bytes else None,
        plan.workspace_bytes,
        torch.cuda.current_stream(x.device).cuda_stream), "cublasLtMatmul")
    return out
