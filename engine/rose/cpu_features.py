"""What the CPU computes natively, read from the CPU itself, never assumed from its make.

A CPU without native bf16 arithmetic would run a bf16 model by converting every operand to
float32 and back: slower than float32 and no more exact. So the CPU's default dtype
(engine/rose/engine.py's `resolve_dtype`) is bf16 only where one of these is present:

- x86: AVX512-BF16 or AMX-BF16, from CPUID (torch's cpuinfo; /proc/cpuinfo's flags where
  torch does not say);
- Arm on Linux: the BF16 extension in /proc/cpuinfo's Features;
- Arm on macOS: the kernel's hw.optional.arm.FEAT_BF16.

Likewise `--quantization int8` runs only where the CPU multiplies int8 natively in the way it was
measured (bench/results/cpu/README.md): AVX512-VNNI or AMX-INT8, read from /proc/cpuinfo's flags.
"""

from __future__ import annotations

import functools
import platform
import subprocess
from pathlib import Path

import torch


@functools.cache
def native_bf16() -> str | None:
    """The name of the CPU feature that computes bf16 natively, or None without one."""
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64", "i686", "x86"):
        return _x86_bf16()
    if machine in ("aarch64", "arm64"):
        return _arm_bf16()
    return None


@functools.cache
def int8_dot_products() -> str | None:
    """The name of the CPU feature that inductor's int8 GEMM template runs on (AMX-INT8 or
    AVX512-VNNI), or None: elsewhere (AVX2, AVX-VNNI, Arm) int8 was not measured."""
    flags = _cpuinfo_words("flags")
    if "amx_int8" in flags:
        return "AMX-INT8"
    if "avx512_vnni" in flags:
        return "AVX512-VNNI"
    return None


def cpu_flags() -> set[str]:
    """The x86 CPU's feature flags as /proc/cpuinfo names them (empty elsewhere)."""
    return _cpuinfo_words("flags")


def _x86_bf16() -> str | None:
    flags = _cpuinfo_words("flags")
    if "amx_bf16" in flags:
        return "AMX-BF16"
    from_cpuid = getattr(torch.cpu, "_is_avx512_bf16_supported", None)  # where torch says
    if "avx512_bf16" in flags or (from_cpuid is not None and from_cpuid()):
        return "AVX512-BF16"
    return None


def _arm_bf16() -> str | None:
    if "bf16" in _cpuinfo_words("features"):
        return "Arm BF16"
    try:
        answer = subprocess.run(["sysctl", "-n", "hw.optional.arm.FEAT_BF16"], capture_output=True, text=True,
                                timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return "Arm BF16" if answer == "1" else None


def _cpuinfo_words(field: str) -> set[str]:
    """The words of /proc/cpuinfo's first `field` line ("flags" on x86, "Features" on Arm)."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return set()
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip().lower() == field:
            return set(value.split())
    return set()
