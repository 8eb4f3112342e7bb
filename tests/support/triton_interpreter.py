"""Triton's interpreter for kernel tests on a machine without CUDA.

Triton decides at its own import whether its library functions (tl.max, tl.sum, ...) are
interpreted, so interpreter mode must be on before anything imports it; on a machine
without CUDA nothing else runs Triton kernels, so the whole session may have it. Each test
module of a kernel calls `use_interpreter()` at import, before importing Triton.
"""

from __future__ import annotations

import os
import sys

import torch


def use_interpreter() -> bool:
    """Turn interpreter mode on where it can be: True when kernels will run interpreted."""
    if torch.cuda.is_available():
        return False
    if "triton" not in sys.modules:
        os.environ["TRITON_INTERPRET"] = "1"
    return os.environ.get("TRITON_INTERPRET") == "1"  # set before Triton's import, by this or another module


SKIP_REASON = ("CUDA present (the GPU tests check the compiled kernel), or Triton was imported before "
               "interpreter mode was set")
