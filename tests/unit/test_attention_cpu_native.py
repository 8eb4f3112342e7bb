"""The native CPU attention kernels (engine/rose/attention/native/attention_bf16.c and attention_f32.c)
against float64 SDPA on each sequence, over every kind of attention the models declare, and their
fallbacks.

Tolerance: each kernel must be as close to the float64 reference as torch's own SDPA in the same
dtype on the same inputs (within 1.5x its mean error and 2x its largest), which the tests
measure beside it. In bf16 both errors are bf16's rounding of the output and of the
probabilities; in float32, a few float32 steps.
"""

from __future__ import annotations

import random
import subprocess
import sys

import numpy as np
import pytest
import torch

from bench.cpu_attention import packed_qkv
from rose_embed.engine.rose.cpu_features import cpu_flags
from rose_embed.engine.rose.attention.ragged import AttentionShape, SDPAPerSequenceBackend
from rose_embed.engine.rose.attention.cpu_native import NativeCPUAttentionBackend, unavailable_reason
from rose_embed.engine.rose.attention.native_build import find_compiler

DTYPES = [torch.bfloat16, torch.float32]
RUNS_HERE = {dtype: unavailable_reason(AttentionShape(2, 2, 32, False), dtype) is None for dtype in DTYPES}
CPU_ALLOWS = {torch.bfloat16: "avx512_bf16" in cpu_flags(), torch.float32: "avx2" in cpu_flags()}
needs_native = pytest.mark.skipif(not all(RUNS_HERE.values()), reason="needs AVX512-BF16, AVX2 and a C compiler")
each_dtype = pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "float32"])


@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "float32"])
def test_the_kernels_build_where_the_cpu_and_a_compiler_allow(dtype):
    # Where the CPU has the instructions and a compiler is present (the development machine and
    # CI), a failure to build is a bug, not a reason to skip every test below.
    if CPU_ALLOWS[dtype] and find_compiler() is not None:
        assert RUNS_HERE[dtype], unavailable_reason(AttentionShape(2, 2, 32, False), dtype)


def _stream(shape: AttentionShape, lengths: list[int], dtype: torch.dtype = torch.bfloat16, seed: int = 0):
    return packed_qkv(shape, lengths, torch.Generator().manual_seed(seed), dtype)


def _compare(shape: AttentionShape, lengths: list[int], dtype: torch.dtype, local: bool = False,
             bias: torch.Tensor | None = None, num_keys: np.ndarray | None = None):
    q, k, v, cu = _stream(shape, lengths, dtype)
    reference = SDPAPerSequenceBackend(shape)
    meta = reference.prepare(None, cu, max(lengths), num_keys=num_keys)
    exact = reference.forward(q.double(), k.double(), v.double(), meta, local=local,
                              position_bias=None if bias is None else bias.double())
    # torch's SDPA takes the bias in the model's dtype, as the engine hands it over
    torch_same = reference.forward(q, k, v, meta, local=local, position_bias=bias).double()
    native = NativeCPUAttentionBackend(shape, dtype)
    out = native.forward(q, k, v, native.prepare(None, cu, max(lengths), num_keys=num_keys), local=local,
                         position_bias=bias)
    assert out.dtype == dtype and out.shape == q.shape and out.is_contiguous()
    error, torch_error = (out.double() - exact).abs(), (torch_same - exact).abs()
    assert error.mean() <= 1.5 * torch_error.mean(), (error.mean(), torch_error.mean())
    assert error.max() <= 2 * torch_error.max(), (error.max(), torch_error.max())


LENGTHS = [1, 2, 3, 15, 16, 17, 31, 33, 64, 100, 250] + random.Random(0).choices(range(1, 80), k=40)


@needs_native
@each_dtype
@pytest.mark.parametrize("head_dim", [32, 64, 96, 128, 256])
@pytest.mark.parametrize("is_causal", [False, True])
def test_plain_attention_matches_sdpa(head_dim, is_causal, dtype):
    _compare(AttentionShape(4, 4, head_dim, is_causal), LENGTHS, dtype)


@needs_native
@pytest.mark.parametrize("head_dim", [8, 40, 72, 200])
def test_float32_takes_any_head_size_in_eights(head_dim):
    _compare(AttentionShape(4, 2, head_dim, False), LENGTHS, torch.float32)


@needs_native
@each_dtype
@pytest.mark.parametrize("is_causal", [False, True])
def test_grouped_query_heads_share_their_key_value_head(is_causal, dtype):
    _compare(AttentionShape(8, 2, 64, is_causal), LENGTHS, dtype)


@needs_native
@each_dtype
@pytest.mark.parametrize("window, is_causal", [((5, 7), False), ((6, 0), True), ((64, 64), False)])
def test_sliding_window_layers(window, is_causal, dtype):
    shape = AttentionShape(4, 2, 64, is_causal, window=window)
    _compare(shape, LENGTHS, dtype, local=True)
    _compare(shape, LENGTHS, dtype, local=False)  # the same model's global layers


@needs_native
@each_dtype
def test_relative_position_bias_clamped_at_the_tables_radius(dtype):
    shape = AttentionShape(4, 4, 64, False, has_position_bias=True)
    bias = torch.randn(4, 2 * 20 + 1, generator=torch.Generator().manual_seed(3)).to(dtype)
    _compare(shape, LENGTHS, dtype, bias=bias)  # sequences up to 250 tokens, radius 20


@needs_native
@each_dtype
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("local", [False, True])
def test_hidden_keys(is_causal, local, dtype):
    # Each sequence's queries see its first num_keys tokens (from one to all of them), every row a query;
    # no more than 40 hidden, so that the window reaches a key from each row (as the engine requires).
    num_keys = np.array([max(1, n - random.Random(n).randrange(min(n, 41))) for n in LENGTHS], dtype=np.int32)
    assert (num_keys < LENGTHS).sum() > len(LENGTHS) // 2
    shape = AttentionShape(4, 2, 64, is_causal, window=(40, 40))
    _compare(shape, LENGTHS, dtype, local=local, num_keys=num_keys)
    q, k, v, cu = _stream(shape, LENGTHS, dtype)
    native = NativeCPUAttentionBackend(shape, dtype)
    assert not torch.equal(native.forward(q, k, v, native.prepare(None, cu, 250, num_keys=num_keys)),
                           native.forward(q, k, v, native.prepare(None, cu, 250)))


@needs_native
@each_dtype
def test_own_softmax_scale(dtype):
    _compare(AttentionShape(2, 1, 256, False, softmax_scale=0.0625), LENGTHS, dtype)


@needs_native
@each_dtype
def test_empty_sequences_and_one_token_batches(dtype):
    shape = AttentionShape(2, 2, 32, False)
    q, k, v, cu = _stream(shape, [1], dtype)
    native = NativeCPUAttentionBackend(shape, dtype)
    out = native.forward(q, k, v, native.prepare(None, [0, 0, 1, 1], 1))
    assert torch.equal(out, v)  # one key: softmax weight 1 on it


@needs_native
@each_dtype
def test_threads_do_not_change_the_result(dtype):
    shape = AttentionShape(12, 12, 32, False)
    q, k, v, cu = _stream(shape, LENGTHS, dtype)
    native = NativeCPUAttentionBackend(shape, dtype)
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


def test_float16_models_keep_grouped_sdpa():
    from rose_embed.engine.rose.attention.backends import make_attention_backend

    backend = make_attention_backend("auto", AttentionShape(2, 2, 32, False), torch.device("cpu"), torch.float16)
    assert backend.name == "sdpa"
    with pytest.raises(ValueError, match="bf16 and float32"):
        make_attention_backend("native", AttentionShape(2, 2, 32, False), torch.device("cpu"), torch.float16)


@pytest.mark.parametrize("dtype, head_dim", [(torch.bfloat16, 48), (torch.float32, 12)])
def test_head_sizes_without_an_instance_fall_back(dtype, head_dim):
    from rose_embed.engine.rose.attention.backends import make_attention_backend

    backend = make_attention_backend("auto", AttentionShape(2, 2, head_dim, False), torch.device("cpu"), dtype)
    assert backend.name == "sdpa"


@needs_native
@each_dtype
def test_auto_picks_the_kernel(dtype):
    from rose_embed.engine.rose.attention.backends import make_attention_backend

    backend = make_attention_backend("auto", AttentionShape(12, 12, 32, False), torch.device("cpu"), dtype)
    assert backend.name == "native" and backend.dtype == dtype
    assert make_attention_backend("sdpa", AttentionShape(12, 12, 32, False), torch.device("cpu"), dtype).name == "sdpa"


@pytest.mark.slow  # a Python process with torch
def test_no_compiler_means_the_portable_path_and_says_why(tmp_path):
    # In a fresh process (the build is cached per process), with the only compiler one that fails.
    script = (
        "import torch\n"
        "from rose_embed.engine.rose.attention.ragged import AttentionShape\n"
        "from rose_embed.engine.rose.attention.backends import make_attention_backend\n"
        "from rose_embed.engine.rose.attention.cpu_native import unavailable_reason\n"
        "shape = AttentionShape(2, 2, 32, False)\n"
        "print(make_attention_backend('auto', shape, torch.device('cpu'), torch.float32).name)\n"
        "print(unavailable_reason(shape, torch.float32))\n"
    )
    env = {"PATH": str(tmp_path), "CC": "/bin/false", "ROSE_KERNEL_CACHE": str(tmp_path / "cache"),
           "HOME": str(tmp_path)}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120,
                            cwd=str(__import__("pathlib").Path(__file__).resolve().parents[2]))
    assert result.returncode == 0, result.stderr
    backend, reason = result.stdout.strip().splitlines()
    assert backend == "sdpa"
    if "avx2" in cpu_flags():
        assert "could not build attention_f32.c" in reason


def test_native_is_refused_on_cuda_by_name():
    from rose_embed.engine.rose.attention.cuda import make_cuda_attention_backend

    with pytest.raises(ValueError, match="native is the CPU's"):
        make_cuda_attention_backend("native", AttentionShape(2, 2, 32, False), torch.device("cuda"), torch.bfloat16)
