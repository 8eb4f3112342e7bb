"""cuBLAS without workspace, for the processes the engine owns.

torch runs each GEMM (the bf16 linears, the addmm with GELU in its epilogue, torch._scaled_mm) at
the algorithm cuBLAS's heuristic picks within the workspace torch gives it, and on Hopper that
algorithm comes with memsets before the GEMM: in a whole-model CUDA graph, nodes of their own that
the GEMM waits on. Within no workspace the heuristic picks algorithms that need none
(bench/probes/fp8_gemm_algos.py, bench/probes/cublas_workspace.py measure both;
bench/results/gpu/README.md has the figures).

torch reads the limits once per process, at its first GEMM, from CUBLASLT_WORKSPACE_SIZE (KiB,
cuBLASLt) and CUBLAS_WORKSPACE_CONFIG (cuBLAS). So the processes the engine owns (the server's
engine processes, `rose-embed embed`, the benchmarks that time the engine) set them before their
first GEMM; a program that embeds the engine in its own process keeps its own, and a limit already
set in the environment is kept everywhere.
"""

from __future__ import annotations

import os

NO_WORKSPACE = {"CUBLASLT_WORKSPACE_SIZE": "0", "CUBLAS_WORKSPACE_CONFIG": ":0:0"}


def give_cublas_no_workspace() -> None:
    """Set this process's cuBLAS workspace limits to none, where the environment sets neither;
    without effect once torch has run a GEMM."""
    if not any(name in os.environ for name in NO_WORKSPACE):
        os.environ.update(NO_WORKSPACE)
