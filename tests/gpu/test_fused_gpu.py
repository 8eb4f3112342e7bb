"""The fused Triton kernels (engine/rose/layers/triton_kernels.py) against their PyTorch references
(engine/rose/layers/fused.py), kernel by kernel and through whole models. Needs CUDA and Triton."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from rose_embed.engine.rose.layers import fused
from rose_embed.engine.rose.layers.rotary import RotaryEmbedding, interleave_rotary_halves

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
DTYPES = [torch.bfloat16, torch.float16, torch.float32]
# bf16 keeps 8 bits of mantissa: the kernels and the references round at the same points but
# may reduce in another order, so they may differ by a couple of ulps of the output.
TOLERANCE = {torch.bfloat16: 2e-2, torch.float16: 3e-3, torch.float32: 1e-5}


def both(fn):
    """fn() with the Triton kernels, then with the references."""
    assert fused.uses_triton(torch.zeros(1, device="cuda")), "Triton kernels unavailable on this CUDA machine"
    out = fn()
    fused.set_fused_kernels(False)
    try:
        return out, fn()
    finally:
        fused.set_fused_kernels(True)


def close(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> None:
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(a.float(), b.float(), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("num_tokens,hidden", [(1, 1024), (77, 384), (4096, 1024), (300, 1000)])
def test_add_rms_norm_matches_reference_and_updates_the_residual(dtype, num_tokens, hidden):
    g = torch.Generator(device="cuda").manual_seed(num_tokens)
    x = torch.randn(num_tokens, hidden, device="cuda", generator=g).to(dtype)
    residual = torch.randn(num_tokens, hidden, device="cuda", generator=g).to(dtype)
    weight = (1 + 0.1 * torch.randn(hidden, device="cuda", generator=g)).to(dtype)
    residuals = [residual.clone(), residual.clone()]
    calls = iter(residuals)
    (out, ref) = both(lambda: fused.rms_norm(x, weight, 1e-6, residual=next(calls)))
    close(out, ref, dtype)
    close(residuals[0], residuals[1], dtype)
    close(residuals[0], residual + x, dtype)
    plain, plain_ref = both(lambda: fused.rms_norm(x, weight, 1e-6))
    close(plain, plain_ref, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("num_tokens,hidden", [(1, 384), (513, 768), (2048, 1024)])
def test_add_layer_norm_matches_reference(dtype, num_tokens, hidden):
    g = torch.Generator(device="cuda").manual_seed(hidden)
    x, residual = (torch.randn(num_tokens, hidden, device="cuda", generator=g).to(dtype) for _ in range(2))
    weight, bias = (torch.randn(hidden, device="cuda", generator=g).to(dtype) for _ in range(2))
    out, ref = both(lambda: fused.add_layer_norm(x, residual, weight, bias, 1e-12))
    close(out, ref, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("num_tokens,intermediate", [(1, 3072), (100, 1536), (4096, 3072), (7, 1000)])
def test_silu_and_mul_matches_reference(dtype, num_tokens, intermediate):
    g = torch.Generator(device="cuda").manual_seed(intermediate)
    gate_up = (3 * torch.randn(num_tokens, 2 * intermediate, device="cuda", generator=g)).to(dtype)
    out, ref = both(lambda: fused.silu_and_mul(gate_up))
    close(out, ref, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("num_tokens,hidden,token_type,offset", [(1, 384, True, 0), (300, 768, True, 0),
                                                                 (4096, 768, False, 2), (77, 1000, True, 0)])
def test_embed_layer_norm_matches_reference(dtype, num_tokens, hidden, token_type, offset):
    """The BERT family's embeddings: word + position (+ token type) then LayerNorm, in one pass."""
    g = torch.Generator(device="cuda").manual_seed(hidden)
    word, position = (torch.randn(n, hidden, device="cuda", generator=g).to(dtype) for n in (30522, 514))
    row = torch.randn(hidden, device="cuda", generator=g).to(dtype) if token_type else None
    weight, bias = (torch.randn(hidden, device="cuda", generator=g).to(dtype) for _ in range(2))
    ids = torch.randint(0, 30522, (num_tokens,), device="cuda", generator=g)
    positions = torch.randint(0, 512, (num_tokens,), device="cuda", generator=g)
    out, ref = both(lambda: fused.embed_layer_norm(ids, positions, word, position, row, offset, weight, bias, 1e-12))
    close(out, ref, dtype)


def _segment_index(workload: str, num_tokens: int, g: torch.Generator) -> tuple[torch.Tensor, int]:
    """(index [T], segment count) as engine/rose/layers/pooling.py lays out up to `num_tokens` tokens:
    documents (runs across many 64-token tiles) or queries (several to a tile), tokens no segment reads
    sent to the extra row (index = the count), five padding segments with none."""
    high = 512 if workload == "documents" else 32
    lengths = torch.randint(1, high, (num_tokens // (high // 2),), device="cuda", generator=g)
    lengths = lengths[: int((lengths.cumsum(0) <= num_tokens).sum())]
    num_segments = len(lengths) + 5
    index = torch.repeat_interleave(torch.arange(len(lengths), device="cuda"), lengths)
    index = torch.where(torch.rand(len(index), device="cuda", generator=g) < 0.02, num_segments, index)
    return index, num_segments


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("workload", ["documents", "queries"])
def test_segment_sums_match_reference(dtype, workload):
    """The pooling's per-segment sums at a full bucket: documents (runs across many 64-token
    tiles) or queries (several to a tile), tokens no segment reads sent to the extra row and
    padding segments with none, as engine/rose/layers/pooling.py lays them out; both sum in float32."""
    g = torch.Generator(device="cuda").manual_seed(11)
    index, num_segments = _segment_index(workload, 16384, g)
    values = torch.randn(len(index), 768, device="cuda", generator=g).to(dtype)
    out, ref = both(lambda: fused.segment_sums(values, index, num_segments + 1))
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("workload", ["documents", "queries"])
def test_segment_maxes_match_reference_exactly(dtype, workload):
    """SPLADE's max pooling (engine/rose/layers/sparse_head.py) of a chunk of MLM logits into maxes pooled
    before, the segments laid out as above: the kernel's float32 atomic max equals scatter_reduce_'s bit for bit."""
    g = torch.Generator(device="cuda").manual_seed(12)
    index, num_segments = _segment_index(workload, 1024, g)
    values = (4 * torch.randn(len(index), 30522, device="cuda", generator=g)).to(dtype)
    start = torch.rand(num_segments + 1, 30522, device="cuda", generator=g)
    out, ref = both(lambda: fused.segment_maxes_into(start.clone(), values, index))
    assert torch.equal(out, ref)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation", ["gelu", "gelu_tanh"])
def test_geglu_matches_reference(dtype, activation):
    g = torch.Generator(device="cuda").manual_seed(5)
    gate_up = (3 * torch.randn(300, 2 * 1152, device="cuda", generator=g)).to(dtype)
    out, ref = both(lambda: fused.act_and_mul(gate_up, activation))
    close(out, ref, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_with_gemma_weight_offset_matches_reference(dtype):
    g = torch.Generator(device="cuda").manual_seed(6)
    x, residual = (torch.randn(257, 768, device="cuda", generator=g).to(dtype) for _ in range(2))
    weight = (0.3 * torch.randn(768, device="cuda", generator=g)).to(dtype)  # Gemma scales by 1 + weight
    residuals = [residual.clone(), residual.clone()]
    calls = iter(residuals)
    out, ref = both(lambda: fused.rms_norm(x, weight, 1e-6, residual=next(calls), weight_offset=1.0))
    close(out, ref, dtype)
    close(residuals[0], residuals[1], dtype)
    expected = torch.nn.functional.rms_norm((residual + x).float(), (768,), 1.0 + weight.float(), 1e-6)
    close(out, expected.to(dtype), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("norm", ["qwen3", "gemma3", "none"])
@pytest.mark.parametrize("heads,kv_heads,head_dim", [(16, 8, 128), (4, 4, 64), (14, 2, 128), (3, 1, 256)])
def test_qk_norm_rope_matches_reference(dtype, norm, heads, kv_heads, head_dim):
    num_tokens, eps = 333, 1e-6
    g = torch.Generator(device="cuda").manual_seed(heads)
    qkv = torch.randn(num_tokens, (heads + 2 * kv_heads) * head_dim, device="cuda", generator=g).to(dtype)
    q_weight = interleave_rotary_halves((1 + 0.2 * torch.randn(head_dim, device="cuda", generator=g)), head_dim)
    k_weight = interleave_rotary_halves((1 + 0.2 * torch.randn(head_dim, device="cuda", generator=g)), head_dim)
    rotary = RotaryEmbedding(head_dim, 4096, 1e6).to("cuda")
    positions = torch.randint(0, 4096, (num_tokens,), device="cuda", generator=g)

    weights = (None, None) if norm == "none" else (q_weight.to(dtype), k_weight.to(dtype))
    offset = 1.0 if norm == "gemma3" else 0.0  # Gemma scales by 1 + weight

    def run():
        rope = rotary.for_batch(positions, tables_only=fused.uses_triton(qkv))
        return fused.qk_norm_rope(qkv, rope, *weights, heads, kv_heads, head_dim, eps, weight_offset=offset)

    (q, k, v), (q_ref, k_ref, v_ref) = both(run)
    assert q.shape == (num_tokens, heads, head_dim) and q.is_contiguous() and k.is_contiguous() and v.is_contiguous()
    close(q, q_ref, dtype)
    close(k, k_ref, dtype)
    assert torch.equal(v, v_ref)


def _rms_error(got: torch.Tensor, exact: torch.Tensor) -> float:
    return ((got.float() - exact).pow(2).mean() / exact.pow(2).mean()).sqrt().item()


@pytest.mark.parametrize("num_tokens,hidden", [(16384, 384), (4096, 768), (33, 1024)])
def test_the_gelu_epilogue_lands_closer_to_float32_than_two_passes(num_tokens, hidden):
    """In bf16, cuBLASLt's tanh GELU on the float32 accumulator against the erf GELU on a rounded
    matmul, both measured against the erf model in float32. Clearly closer also shows that the
    epilogue ran (a fallback to a matmul and a GELU pass would round twice, as two passes do)."""
    dtype = torch.bfloat16
    g = torch.Generator(device="cuda").manual_seed(hidden)
    x = torch.randn(num_tokens, hidden, device="cuda", generator=g).to(dtype)
    weight = (torch.randn(4 * hidden, hidden, device="cuda", generator=g) / hidden ** 0.5).to(dtype)
    bias = (0.1 * torch.randn(4 * hidden, device="cuda", generator=g)).to(dtype)
    exact = F.gelu(F.linear(x.float(), weight.float(), bias.float()))
    with fused.gelu_epilogue(False):
        two_passes = fused.linear_gelu(x, weight, bias, "none")
    with fused.gelu_epilogue(True):
        epilogue = fused.linear_gelu(x, weight, bias, "none")
    assert _rms_error(epilogue, exact) < 0.9 * _rms_error(two_passes, exact)
    close(epilogue, exact, dtype)


def _linear_gelu_with_epilogue(dtype: torch.dtype, approximate: str):
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(500, 256, device="cuda", generator=g).to(dtype)
    weight = (torch.randn(1024, 256, device="cuda", generator=g) / 16).to(dtype)
    bias = (0.1 * torch.randn(1024, device="cuda", generator=g)).to(dtype)
    with fused.gelu_epilogue(True):
        return fused.linear_gelu(x, weight, bias, approximate), (x, weight, bias)


def test_a_tanh_gelu_model_in_bf16_gets_the_epilogue_exact_to_its_rounding():
    got, (x, weight, bias) = _linear_gelu_with_epilogue(torch.bfloat16, "tanh")
    close(got, F.gelu(F.linear(x.float(), weight.float(), bias.float()), approximate="tanh"), torch.bfloat16)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_fp16_and_float32_keep_the_gelu_pass(dtype, approximate):
    got, (x, weight, bias) = _linear_gelu_with_epilogue(dtype, approximate)
    with fused.gelu_epilogue(False):
        assert torch.equal(got, fused.linear_gelu(x, weight, bias, approximate))


@pytest.mark.parametrize("architecture,gelu_epilogue", [("bert", False), ("bert", True), ("qwen3", False)])
@torch.inference_mode()
def test_whole_model_fused_equals_reference(architecture, gelu_epilogue):
    from rose_embed.engine.contract.batch import pack
    from rose_embed.engine.rose.attention.backends import make_attention_backend
    from rose_embed.engine.rose.models import MODEL_CLASSES
    from rose_embed.engine.rose.layers.head import SentenceHead
    from rose_embed.engine.rose.runner import ModelRunner

    if architecture == "bert":
        config = dict(vocab_size=1000, hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=512, max_position_embeddings=512, type_vocab_size=2, layer_norm_eps=1e-12)
        is_causal, pooling = False, "mean"
    else:
        config = dict(vocab_size=1000, hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=64, intermediate_size=512, max_position_embeddings=4096,
                      rms_norm_eps=1e-6, rope_theta=1e6)
        is_causal, pooling = True, "last"
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = MODEL_CLASSES[architecture](config)
        for p in model.parameters():  # norm weights away from 1, so that the kernels' weight use matters
            p.data.normal_(0, 0.05).add_(torch.ones_like(p) if p.dim() == 1 else 0)
    model = model.to(torch.bfloat16).eval()
    attention = make_attention_backend("varlen", model.attention_shape(is_causal), torch.device("cuda"), torch.bfloat16)
    g = torch.Generator().manual_seed(1)
    seqs = [torch.randint(0, 1000, (n,), generator=g).numpy().astype("int32") for n in (1, 7, 64, 200, 512)]

    def run(eager: bool):  # a runner of its own: a captured graph keeps the kernels it was captured with
        runner = ModelRunner(model, SentenceHead(pooling), attention, torch.device("cuda"), max_num_tokens=4096,
                             max_num_seqs=64, max_seqlen=512, enforce_eager=eager)
        return [runner.execute(pack(seqs)).wait() for _ in range(3)][-1]  # eager, capture, replay

    # Graphs where the GELU epilogue is on: its matmul must capture and replay as the others do.
    assert fused.uses_triton(torch.zeros(1, device="cuda")), "Triton kernels unavailable on this CUDA machine"
    with fused.gelu_epilogue(gelu_epilogue):
        out = run(eager=not gelu_epilogue)
    fused.set_fused_kernels(False)
    try:
        ref = run(eager=True)
    finally:
        fused.set_fused_kernels(True)
    cos = (out * ref).sum(1)
    assert cos.min() >= 0.999, cos


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("is_causal,local", [(False, False), (False, True), (True, False), (True, True)])
@pytest.mark.parametrize("num_kv_heads,head_dim", [(4, 32), (2, 64), (4, 24)])
def test_biased_attention_matches_its_definition(dtype, is_causal, local, num_kv_heads, head_dim):
    """The Triton kernel behind MPNet's relative position bias against the scores, mask and
    softmax written out (tests/unit/test_attention_cpu.py), on sequences longer than its blocks."""
    from rose_embed.engine.rose.attention.ragged import AttentionShape
    from rose_embed.engine.rose.attention.triton_biased import varlen_attention_with_bias
    from tests.unit.test_attention_cpu import _naive

    g = torch.Generator().manual_seed(head_dim)
    lengths = [1, 5, 63, 64, 65, 200, 3, 130]
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    shape = AttentionShape(4, num_kv_heads, head_dim, is_causal, softmax_scale=head_dim**-0.5, window=(37, 50),
                           has_position_bias=True)
    q, k, v = (torch.randn(cu[-1], heads, head_dim, generator=g) for heads in (4, num_kv_heads, num_kv_heads))
    # The inputs rounded to `dtype` first: the kernel is checked, not the rounding of its inputs.
    q, k, v = (x.to(dtype).float() for x in (q, k, v))
    table = (2 * torch.randn(4, 2 * 255 + 1, generator=g)).to(dtype).float()
    want = _naive(q, k, v, cu, shape, local, table)
    cu_cuda = torch.tensor(cu, dtype=torch.int32, device="cuda")
    got = varlen_attention_with_bias(*(x.to("cuda", dtype) for x in (q, k, v)), cu_cuda, 256,
                                     table.to("cuda", dtype), shape.scale, is_causal, shape.window if local else None)
    close(got.cpu(), want, dtype)
