"""The native CPU attention kernel (engine/rose/layers/native/attention_bf16.c) against float32
SDPA on each sequence, over every kind of attention the models declare, and its fallbacks.

Tolerance: the kernel's output is bf16, so against the float32 reference its error is bounded
by bf16's rounding of the output plus the bf16 rounding of the probabilities; it must be as
close as torch's own bf16 SDPA on the same inputs (within 1.5x its mean error and 2x its
largest), which the tests measure beside it.
"""

from __future__ import annotations

import random
import subprocess
import sys

import pytest
import torch

from engine.rose.cpu_features import cpu_flags
from engine.rose.layers.attention import AttentionShape, SDPAPerSequenceBackend
from engine.rose.layers.attention_cpu_native import NativeCPUAttentionBackend, unavailable_reason
from engine.rose.native_build import find_compiler

NATIVE_RUNS_HERE = unavailable_reason(AttentionShape(2, 2, 32, False), torch.bfloat16) is None
HAS_AVX512_BF16 = "avx512_bf16" in cpu_flags() and find_compiler() is not None
needs_native = pytest.mark.skipif(not NATIVE_RUNS_HERE, reason="needs AVX512-BF16 and a C compiler")


def test_the_kernel_builds_where_the_cpu_and_a_compiler_allow():
    # On a CPU with AVX512-BF16 and a compiler (the development machine and CI), a failure to
    # build is a bug, not a reason to skip every test below.
    if HAS_AVX512_BF16:
        assert NATIVE_RUNS_HERE, unavailable_reason(AttentionShape(2, 2, 32, False), torch.bfloat16)


def _stream(shape: AttentionShape, lengths: list[int], seed: int = 0):
    """q, k, v as views into one fused qkv projection, as the models slice them."""
    generator = torch.Generator().manual_seed(seed)
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    q_width, kv_width = shape.num_heads * shape.head_dim, shape.num_kv_heads * shape.head_dim
    qkv = torch.randn(cu[-1], q_width + 2 * kv_width, generator=generator).bfloat16()
    q = qkv[:, :q_width].view(-1, shape.num_heads, shape.head_dim)
    k = qkv[:, q_width:q_width + kv_width].view(-1, shape.num_kv_heads, shape.head_dim)
    v = qkv[:, q_width + kv_width:].view(-1, shape.num_kv_heads, shape.head_dim)
    return q, k, v, cu


def _compare(shape: AttentionShape, lengths: list[int], local: bool = False, bias: torch.Tensor | None = None):
    q, k, v, cu = _stream(shape, lengths)
    reference = SDPAPerSequenceBackend(shape)
    meta = reference.prepare(None, cu, max(lengths))
    exact = reference.forward(q.float(), k.float(), v.float(), meta, local=local, position_bias=bias)
    torch_bf16 = reference.forward(q, k, v, meta, local=local, position_bias=bias).float()
    native = NativeCPUAttentionBackend(shape)
    out = native.forward(q, k, v, native.prepare(None, cu, max(lengths)), local=local, position_bias=bias)
    assert out.dtype == torch.bfloat16 and out.shape == q.shape and out.is_contiguous()
    error, torch_error = (out.float() - exact).abs(), (torch_bf16 - exact).abs()
    assert error.mean() <= 1.5 * torch_error.mean(), (error.mean(), torch_error.mean())
    assert error.max() <= 2 * torch_error.max() + 1e-3, (error.max(), torch_error.max())


LENGTHS = [1, 2, 3, 15, 16, 17, 31, 33, 64, 100, 250] + random.Random(0).choices(range(1, 80), k=40)


@needs_native
@pytest.mark.parametrize("head_dim", [32, 64, 96, 128, 256])
@pytest.mark.parametrize("is_causal", [False, True])
def test_plain_attention_matches_float32_sdpa(head_dim, is_causal):
    _compare(AttentionShape(4, 4, head_dim, is_causal), LENGTHS)


@needs_native
@pytest.mark.parametrize("is_causal", [False, True])
def test_grouped_query_heads_share_their_key_value_head(is_causal):
    _compare(AttentionShape(8, 2, 64, is_causal), LENGTHS)


@needs_native
@pytest.mark.parametrize("window, is_causal", [((5, 7), False), ((6, 0), True), ((64, 64), False)])
def test_sliding_window_layers(window, is_causal):
    shape = AttentionShape(4, 2, 64, is_causal, window=window)
    _compare(shape, LENGTHS, local=True)
    _compare(shape, LENGTHS, local=False)  # the same model's global layers


@needs_native
def test_relative_position_bias_clamped_at_the_tables_radius():
    shape = AttentionShape(4, 4, 64, False, has_position_bias=True)
    bias = torch.randn(4, 2 * 20 + 1, generator=torch.Generator().manual_seed(3))
    _compare(shape, LENGTHS, bias=bias)  # sequences up to 250 tokens, radius 20


@needs_native
def test_own_softmax_scale():
    _compare(AttentionShape(2, 1, 256, False, softmax_scale=0.0625), LENGTHS)


@needs_native
def test_empty_sequences_and_one_token_batches():
    shape = AttentionShape(2, 2, 32, False)
    q, k, v, cu = _stream(shape, [1])
    native = NativeCPUAttentionBackend(shape)
    out = native.forward(q, k, v, native.prepare(None, [0, 0, 1, 1], 1))
    assert torch.equal(out, v)  # one key: softmax weight 1 on it


@needs_native
def test_threads_do_not_change_the_result():
    shape = AttentionShape(12, 12, 32, False)
    q, k, v, cu = _stream(shape, LENGTHS)
    native = NativeCPUAttentionBackend(shape)
    meta = native.prepare(None, cu, max(LENGTHS))
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = native.forward(q, k, v, meta)
        torch.set_num_threads(2)
        two = native.forward(q, k, v, meta)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one, two)


def test_float32_models_keep_grouped_sdpa():
    from engine.rose.layers.attention_backends import make_attention_backend

    backend = make_attention_backend("auto", AttentionShape(2, 2, 32, False), torch.device("cpu"), torch.float32)
    assert backend.name == "sdpa"
    with pytest.raises(ValueError, match="bf16 only"):
        make_attention_backend("native", AttentionShape(2, 2, 32, False), torch.device("cpu"), torch.float32)


def test_head_sizes_without_an_instance_fall_back():
    from engine.rose.layers.attention_backends import make_attention_backend

    shape = AttentionShape(2, 2, 48, False)
    backend = make_attention_backend("auto", shape, torch.device("cpu"), torch.bfloat16)
    assert backend.name == "sdpa"


@needs_native
def test_auto_picks_the_kernel_for_bf16():
    from engine.rose.layers.attention_backends import make_attention_backend

    backend = make_attention_backend("auto", AttentionShape(12, 12, 32, False), torch.device("cpu"), torch.bfloat16)
    assert backend.name == "native"
    assert make_attention_backend("sdpa", AttentionShape(12, 12, 32, False), torch.device("cpu"),
                                  torch.bfloat16).name == "sdpa"


def test_no_compiler_means_the_portable_path_and_says_why(tmp_path):
    # In a fresh process (the build is cached per process), with the only compiler one that fails.
    script = (
        "import torch\n"
        "from engine.rose.layers.attention import AttentionShape\n"
        "from engine.rose.layers.attention_backends import make_attention_backend\n"
        "from engine.rose.layers.attention_cpu_native import unavailable_reason\n"
        "shape = AttentionShape(2, 2, 32, False)\n"
        "print(make_attention_backend('auto', shape, torch.device('cpu'), torch.bfloat16).name)\n"
        "print(unavailable_reason(shape, torch.bfloat16))\n"
    )
    env = {"PATH": str(tmp_path), "CC": "/bin/false", "ROSE_KERNEL_CACHE": str(tmp_path / "cache"),
           "HOME": str(tmp_path)}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120,
                            cwd=str(__import__("pathlib").Path(__file__).resolve().parents[1]))
    assert result.returncode == 0, result.stderr
    backend, reason = result.stdout.strip().splitlines()
    assert backend == "sdpa"
    if "avx512_bf16" in cpu_flags():
        assert "could not build attention_bf16.c" in reason
