"""Kernels of engine/rose/quantization/triton_fp8_kernels.py against their references
(engine/rose/quantization/fp8_fused.py), on the CPU through Triton's interpreter; tests/gpu/test_fp8_gpu.py
checks them compiled.

The interpreter's own float32 -> e4m3 and float32 -> bf16 conversions round half up and drop
the carry into the exponent (125.7 at scale 1 becomes 64, not 128), where the GPU's conversion
instructions round to nearest even as torch does; the tests convert as the GPU does, and with
that the kernels match their references in bf16 too.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tests.support.triton_interpreter import SKIP_REASON, use_interpreter

_INTERPRETED = use_interpreter()
pytest.importorskip("triton")
pytestmark = pytest.mark.skipif(not _INTERPRETED, reason=SKIP_REASON)

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from rose_embed.engine.rose.quantization import fp8_fused  # noqa: E402
from rose_embed.engine.rose.quantization.quantized_rows import quantize_rows_reference  # noqa: E402
from rose_embed.engine.rose.quantization.triton_fp8_kernels import _normal_cdf  # noqa: E402
from tests.support.fp8_checks import assert_rows_close  # noqa: E402

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


@pytest.fixture(autouse=True)
def _e4m3_rounded_as_on_the_gpu(monkeypatch):
    import triton.language as tl
    from triton.runtime import interpreter

    convert = interpreter._convert_float
    wide = {tl.float32: np.float32, tl.float16: np.float16}

    narrow = {tl.float8e4nv: (torch.float8_e4m3fn, torch.uint8), tl.bfloat16: (torch.bfloat16, torch.uint16)}

    def gpu_like(data, input_dtype, output_dtype, rounding_mode):
        if output_dtype in narrow and input_dtype in wide:
            dtype, bits = narrow[output_dtype]
            values = torch.from_numpy(np.frombuffer(data.tobytes(), dtype=wide[input_dtype]).copy())
            return values.float().to(dtype).view(bits).numpy().reshape(data.shape)
        return convert(data, input_dtype, output_dtype, rounding_mode)

    monkeypatch.setattr(interpreter, "_convert_float", gpu_like)


def _kernels():
    from rose_embed.engine.rose.quantization import triton_fp8_kernels

    return triton_fp8_kernels


def _randn(*shape, seed: int, dtype: torch.dtype, scale: float = 1.0) -> torch.Tensor:
    return (scale * torch.randn(*shape, generator=torch.Generator().manual_seed(seed))).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("num_rows,n_cols", [(3, 1024), (5, 2500), (4, 48), (3, 9728), (3, 16400)])
def test_quantize_rows(dtype, num_rows, n_cols):
    """Rows held whole (up to triton_fp8_kernels._WHOLE_ROW_MAX columns, not a power of two) and rows
    walked in chunks (16,400: not a whole number of chunks); a row of zeros; a row of one large value."""
    x = _randn(num_rows, n_cols, seed=n_cols, dtype=dtype, scale=3.0)
    x[1] = 0
    x[2, 7] = 300
    got = _kernels().quantize_rows(x)
    assert_rows_close(got, quantize_rows_reference(x), max_share_differing=0)
    assert got.values[1].float().abs().sum() == 0


@pytest.mark.parametrize("rows_per_block,programs", [(2, None), (4, None), (1, 3), (2, 2)])
def test_rows_held_whole_in_blocks(rows_per_block, programs):
    """Blocks of several rows, the last one short (7 rows), one to a program or walked in turn by
    fewer programs than blocks (prefetching the next): each row keeps its own scale."""
    kernels = _kernels()
    x = _randn(7, 1536, seed=15, dtype=torch.bfloat16, scale=2.0) * torch.arange(1, 8).to(torch.bfloat16)[:, None]
    x[3] = 0
    launch = kernels.row_launch(1536, rows=rows_per_block, programs=programs)
    assert launch.whole_row
    if programs:
        assert launch.grid(7) == (programs,)  # fewer programs than blocks: each walks several
    assert_rows_close(kernels.quantize_rows(x, launch), quantize_rows_reference(x), max_share_differing=0)
    assert_rows_close(kernels.activation_rows(x, "gelu", launch),
                      quantize_rows_reference(fp8_fused.activation(x, "gelu")))
    gate_up = torch.cat([x, x.flip(0)], dim=1)
    assert_rows_close(kernels.act_and_mul_rows(gate_up, "silu", launch),
                      quantize_rows_reference(F.silu(x) * x.flip(0)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n_cols", [384, 1000])
def test_add_layer_norm_rows(dtype, n_cols):
    x, residual = _randn(6, n_cols, seed=1, dtype=dtype), _randn(6, n_cols, seed=2, dtype=dtype)
    weight, bias = 1 + _randn(n_cols, seed=3, dtype=dtype, scale=0.1), _randn(n_cols, seed=4, dtype=dtype, scale=0.1)
    out, rows = _kernels().add_layer_norm_rows(x, residual, weight, bias, 1e-12)
    want = F.layer_norm(x + residual, (n_cols,), weight, bias, 1e-12)
    torch.testing.assert_close(out, want, rtol=1e-3, atol=1e-3)
    assert_rows_close(rows, quantize_rows_reference(out))
    assert_rows_close(rows, quantize_rows_reference(want))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("token_type", [True, False])
def test_embed_layer_norm_rows(dtype, token_type):
    hidden, vocab, num_positions = 96, 50, 40
    word, position = _randn(vocab, hidden, seed=5, dtype=dtype), _randn(num_positions, hidden, seed=6, dtype=dtype)
    types = _randn(hidden, seed=7, dtype=dtype) if token_type else None
    weight, bias = 1 + _randn(hidden, seed=8, dtype=dtype, scale=0.1), _randn(hidden, seed=9, dtype=dtype, scale=0.1)
    ids, positions = torch.tensor([3, 0, 49, 7, 7]), torch.tensor([0, 1, 2, 0, 30])
    out, rows = _kernels().embed_layer_norm_rows(ids, positions, word, position, types, 2, weight, bias, 1e-12)
    want = F.embedding(ids, word) + F.embedding(positions + 2, position)
    want = F.layer_norm(want + types if token_type else want, (hidden,), weight, bias, 1e-12)
    torch.testing.assert_close(out, want, rtol=1e-3, atol=1e-3)
    assert_rows_close(rows, quantize_rows_reference(out))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_residual", [True, False])
def test_add_rms_norm_rows_updates_the_residual(dtype, with_residual):
    n_cols = 320
    x, residual = _randn(5, n_cols, seed=10, dtype=dtype), _randn(5, n_cols, seed=11, dtype=dtype)
    weight = 1 + _randn(n_cols, seed=12, dtype=dtype, scale=0.1)
    mine = residual.clone() if with_residual else None
    rows = _kernels().add_rms_norm_rows(x, mine, weight, 1e-6)
    summed = residual + x if with_residual else x
    if with_residual:
        torch.testing.assert_close(mine, summed, rtol=0, atol=0)
    want = F.rms_norm(summed, (n_cols,), weight, 1e-6)
    assert_rows_close(rows, quantize_rows_reference(want))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation", ["silu", "gelu", "gelu_tanh"])
@pytest.mark.parametrize("width", [1300, 9728, 16400])
def test_act_and_mul_rows(dtype, activation, width):
    """Rows held whole (1,300 values; 9,728, the Qwen3-4B shape's) and rows walked in chunks (16,400:
    past the whole-row limit)."""
    gate_up = _randn(4, 2 * width, seed=13, dtype=dtype, scale=2.0)
    rows = _kernels().act_and_mul_rows(gate_up, activation)
    gate, up = gate_up.chunk(2, dim=-1)
    act = {"silu": F.silu, "gelu": F.gelu, "gelu_tanh": lambda g: F.gelu(g, approximate="tanh")}[activation]
    assert_rows_close(rows, quantize_rows_reference(act(gate) * up))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation", ["gelu", "gelu_tanh", "relu"])
@pytest.mark.parametrize("width", [1536, 16400])
def test_activation_rows(dtype, activation, width):
    """GELU by the kernels' erfc fit, held to torch's GELU like the others to their references."""
    x = _randn(3, width, seed=14, dtype=dtype, scale=2.0)
    rows = _kernels().activation_rows(x, activation)
    assert_rows_close(rows, quantize_rows_reference(fp8_fused.activation(x, activation)))


def test_rows_up_to_the_largest_shapes_are_held_whole():
    """The widest activation of the benchmark shapes (the Qwen3-4B MLP's, gated: two 9,728-value
    halves) is read once, held whole, not walked twice in chunks; wider rows are."""
    kernels = _kernels()
    assert kernels.row_launch(9728, gated=True).whole_row
    assert not kernels.row_launch(16400).whole_row


@pytest.mark.parametrize("n_cols,head,tail", [(3072, 2048, 1024), (9728, 8192, 2048), (2500, 2048, 512),
                                               (1024, 1024, 0)])
def test_rows_not_a_power_of_two_wide_are_held_as_a_head_and_a_tail(n_cols, head, tail):
    """A row is held as the largest power of two below its width and a tail, not padded to the
    next power of two (whose masked lanes would compute the activation too), with the padded
    launch's values bit for bit."""
    kernels = _kernels()
    launch = kernels.row_launch(n_cols)
    assert (launch.block, launch.tail) == (head, tail)
    x = _randn(3, n_cols, seed=16, dtype=torch.bfloat16, scale=2.0)
    padded = kernels.row_launch(n_cols, split=False)
    assert (padded.block, padded.tail) == (triton.next_power_of_2(n_cols), 0)
    got, want = kernels.activation_rows(x, "gelu", launch), kernels.activation_rows(x, "gelu", padded)
    assert torch.equal(got.values.view(torch.uint8), want.values.view(torch.uint8))
    assert torch.equal(got.scales, want.scales)


@triton.jit
def _gelu_by_erfc_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + cols)
    tl.store(out_ptr + cols, x * _normal_cdf(x))


def test_normal_cdf_by_erfc_is_gelu_far_below_bf16_rounding():
    """The erfc fit behind the row kernels' GELU against GELU in float64 (by erfc: 1 + erf(x)
    cancels for x below -5), over the range an activation spans: within 5e-5 of each value (float32's rounding
    of the exp's argument, as large as 73 at -12, sets it), where bf16 rounds by up to 4e-3."""
    x = torch.linspace(-12, 12, 4096, dtype=torch.float32)
    got = torch.empty_like(x)
    _gelu_by_erfc_kernel[(1,)](x, got, BLOCK=4096)
    want = x.double() * 0.5 * torch.special.erfc(-x.double() * 0.5 ** 0.5)
    relative = ((got.double() - want).abs() / want.abs())[want != 0]
    assert relative.max() < 5e-5, relative.max()
