"""The CPU's default dtype follows what the CPU computes natively (engine/rose/cpu_features.py):
bf16 with AVX512-BF16, AMX or Arm BF16, float32 without; read from the CPU, never assumed."""

from __future__ import annotations

import pytest
import torch

from rose_embed.engine.rose import cpu_features
from rose_embed.engine.rose.engine import resolve_dtype


@pytest.fixture
def cpu(monkeypatch):
    """Set what the machine reports: cpu(machine, cpuinfo words by field, torch's AVX512-BF16 answer)."""
    def set_cpu(machine: str, words: dict[str, set[str]], torch_says: bool | None = None):
        cpu_features.native_bf16.cache_clear()
        monkeypatch.setattr(cpu_features.platform, "machine", lambda: machine)
        monkeypatch.setattr(cpu_features, "_cpuinfo_words", lambda field: words.get(field, set()))
        if torch_says is None:
            monkeypatch.delattr(torch.cpu, "_is_avx512_bf16_supported", raising=False)
        else:
            monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: torch_says, raising=False)
        monkeypatch.setattr(cpu_features.subprocess, "run", _no_sysctl)

    yield set_cpu
    cpu_features.native_bf16.cache_clear()


def _no_sysctl(*args, **kwargs):
    raise OSError("no sysctl on this machine")


def test_x86_features(cpu):
    cpu("x86_64", {"flags": {"avx512f", "avx512_bf16", "avx512_vnni"}})
    assert cpu_features.native_bf16() == "AVX512-BF16"
    cpu("x86_64", {"flags": {"avx512f", "amx_tile", "amx_bf16", "avx512_bf16"}})
    assert cpu_features.native_bf16() == "AMX-BF16"
    cpu("x86_64", {"flags": {"avx2", "avx512f"}}, torch_says=False)  # AVX-512 alone only emulates bf16
    assert cpu_features.native_bf16() is None
    cpu("x86_64", {}, torch_says=True)  # no /proc/cpuinfo, CPUID through torch
    assert cpu_features.native_bf16() == "AVX512-BF16"


def test_arm_features(cpu):
    cpu("aarch64", {"features": {"fp", "asimd", "bf16", "i8mm"}})
    assert cpu_features.native_bf16() == "Arm BF16"
    cpu("aarch64", {"features": {"fp", "asimd"}})
    assert cpu_features.native_bf16() is None


def test_auto_is_bf16_only_where_the_cpu_computes_it(cpu):
    cpu("x86_64", {"flags": {"avx512_bf16"}})
    dtype, why = resolve_dtype("auto", torch.device("cpu"))
    assert dtype == torch.bfloat16 and "AVX512-BF16" in why and "--dtype float32" in why
    cpu("x86_64", {"flags": {"avx2"}}, torch_says=False)
    dtype, why = resolve_dtype("auto", torch.device("cpu"))
    assert dtype == torch.float32 and "no native bfloat16" in why
    assert resolve_dtype("auto", torch.device("cuda"))[0] == torch.bfloat16
    assert resolve_dtype("float32", torch.device("cpu"))[0] == torch.float32  # a flag is obeyed as it is
    with pytest.raises(ValueError, match="dtype must be one of"):
        resolve_dtype("int4", torch.device("cpu"))
