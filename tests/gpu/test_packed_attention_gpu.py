"""The packed-tile kernel and --attention-backend auto on CUDA.

Kernel: bf16 and fp16 against the definition (tests/unit/test_attention_cpu.py's _naive, fp32 on
the CPU) at the three served head shapes (MiniLM 12 x 32, BERT-base 12 x 64, Qwen3-0.6B
16 x 128 with 8 key/value heads), causal and not, on a stream of many short sequences
around long ones, tolerances as tests/gpu/test_fused_gpu.py's; a CUDA graph of it replays a new
batch of the same layout exactly as an eager run computes it. Auto: the choice covers
every graph class within its budget, and the model with it matches Hugging Face in fp32
(>= 0.999) and the eager run (>= 0.9999), as tests/gpu/test_gpu.py asks of each backend.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import pytest
import torch

from rose_embed.engine.rose.attention.ragged import AttentionShape
from tests.unit.test_attention_cpu import _naive

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]
TOLERANCE = {torch.bfloat16: 2e-2, torch.float16: 3e-3}


def _lengths(seed: int) -> list[int]:
    """Queries (1-40 tokens) before, between and after documents of 300 and 512 tokens."""
    rng = np.random.default_rng(seed)
    short = [int(n) for n in rng.integers(1, 41, 90)]
    return [1] + short[:40] + [512] + short[40:70] + [300, 129] + short[70:]


def _cu(lengths: list[int]) -> list[int]:
    return np.concatenate([[0], np.cumsum(lengths)]).astype(int).tolist()


@pytest.mark.parametrize("flipped", [None, "mask_inner_blocks", "share_kv_heads", "fold_scale", "tma_loads"],
                         ids=["default", "inner-masks-flipped", "kv-head-sharing-flipped", "scale-folding-flipped",
                              "tma-loads-flipped"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("is_causal", [False, True], ids=["bidirectional", "causal"])
@pytest.mark.parametrize("heads,kv_heads,head_dim", [(12, 12, 32), (12, 12, 64), (16, 8, 128)],
                         ids=["minilm", "bert-base", "qwen3"])
def test_kernel_matches_the_definition(dtype, is_causal, heads, kv_heads, head_dim, flipped):
    """The default launch for the shape, and the default with each option turned the other way."""
    from rose_embed.engine.rose.attention.packed import default_tiles, packed_attention, sequence_bounds

    cu = _cu(_lengths(head_dim))
    shape = AttentionShape(heads, kv_heads, head_dim, is_causal)
    g = torch.Generator().manual_seed(head_dim)
    # Rounded to `dtype` first: the kernel is checked, not the rounding of its inputs.
    q, k, v = (torch.randn(cu[-1], n, head_dim, generator=g).to(dtype).float() for n in (heads, kv_heads, kv_heads))
    want = _naive(q, k, v, cu, shape, False, None)
    cu_cuda = torch.tensor(cu + [cu[-1]] * 3, dtype=torch.int32, device="cuda")  # with empty segments, as graphs pad
    start, end = sequence_bounds(cu_cuda, cu[-1])
    tiles = default_tiles(head_dim, heads // kv_heads)
    if flipped:
        tiles = replace(tiles, **{flipped: not getattr(tiles, flipped)})
    got = packed_attention(*(x.to("cuda", dtype) for x in (q, k, v)), start, end, shape.scale, is_causal, tiles)
    torch.testing.assert_close(got.float().cpu(), want, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])


@pytest.mark.parametrize("fused", [True, False], ids=["views-of-one-projection", "own-tensors"])
@pytest.mark.parametrize("kv_heads,head_dim", [(12, 32), (12, 64), (8, 128)], ids=["minilm", "bert-base", "qwen3"])
def test_the_models_layouts_take_the_tma_loads(fused, kv_heads, head_dim):
    """The default launches read key/value blocks through TMA on Hopper, and the layouts the
    models hand over qualify: the BERT family's views into one fused projection, and the
    Qwen3 family's own tensors out of its q/k norm. Otherwise the kernel would fall back to
    plain loads without a word, and the sweep's gain would be gone."""
    from rose_embed.engine.rose.attention.packed import _tma_ready, default_tiles

    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("TMA needs Hopper or later")
    assert default_tiles(head_dim, 2 if head_dim == 128 else 1).tma_loads
    num_tokens = 1000
    if fused:
        qkv = torch.empty(num_tokens, 3 * kv_heads * head_dim, device="cuda", dtype=torch.bfloat16)
        k = qkv.view(num_tokens, 3, kv_heads, head_dim).unbind(1)[1]
    else:
        k = torch.empty(num_tokens, kv_heads, head_dim, device="cuda", dtype=torch.bfloat16)
    assert _tma_ready(k)


@torch.inference_mode()
def test_a_graph_remakes_the_bounds_from_each_batch():
    """Bounds made inside the graph: a replay on another batch of the same layout (same token
    count and segment count, other lengths) equals an eager run on that batch, bit for bit."""
    from rose_embed.engine.rose.attention.cuda import PackedAttentionBackend

    shape = AttentionShape(16, 8, 128, True)
    backend = PackedAttentionBackend(shape)
    first, second = _lengths(1), _lengths(2)
    second[41] += sum(first) - sum(second)  # same token count (the 512-token document gives or takes)
    assert len(first) == len(second) and second[41] > 0 and first != second
    cu = torch.tensor(_cu(first), dtype=torch.int32, device="cuda")
    q, k, v = (torch.randn(cu[-1].item(), n, 128, device="cuda", dtype=torch.bfloat16) for n in (16, 8, 8))
    backend.forward(q, k, v, backend.prepare_graph("key", cu, _cu(first), 512))  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = backend.forward(q, k, v, backend.prepare_graph("key", cu, _cu(first), 512))
    cu.copy_(torch.tensor(_cu(second), dtype=torch.int32))
    for x in (q, k, v):
        x.normal_()
    graph.replay()
    eager = backend.forward(q, k, v, backend.prepare(cu, _cu(second), 512))
    torch.testing.assert_close(out, eager, atol=0, rtol=0)


@pytest.mark.parametrize("is_causal", [False, True], ids=["bidirectional", "causal"])
def test_auto_chooses_every_class_and_matches_the_reference(is_causal):
    from rose_embed.engine.contract.batch import pack
    from tests.gpu.test_gpu import (_bert_config, _causal_bert_reference, _hf_bert, _hf_reference, _ours, _runner,
                                cosines, random_seqs)

    hf_model = _hf_bert(_bert_config(384, 12))
    model = _ours("bert", hf_model)
    runner = _runner(model, "auto", is_causal)
    assert runner.attention.name == "auto" and "packed" in runner.attention.candidates
    started = time.perf_counter()
    log = runner.choose_attention()
    seconds = time.perf_counter() - started
    print(log)
    classes = runner.graphs.graph_classes()
    assert "packed" in runner.attention.candidates, "the packed kernel failed and was dropped (see the log)"
    assert set(runner.attention.table) == set(classes) and seconds < 30, seconds
    assert set(runner.attention.table.values()) <= set(runner.attention.candidates)
    rng = np.random.default_rng(4)
    queries = [rng.integers(5, 1024, n, dtype=np.int32) for n in rng.integers(1, 33, 250)]  # within the runner's 256 sequences
    for seqs in (random_seqs(1, 1024), queries):
        reference = _causal_bert_reference(hf_model, seqs) if is_causal else _hf_reference(hf_model, seqs, "mean")
        replays = runner.num_graph_replays
        runs = [runner.execute(pack(seqs)).wait() for _ in range(2 * runner.graphs.num_slots + 1)]
        assert runner.num_graph_replays > replays, "the batch should have been captured and replayed"
        for out in runs:
            assert cosines(out, reference).min() >= 0.999
        assert cosines(runs[-1], runs[0]).min() >= 0.99999  # replay == the key's eager run (same backend)
        eager = _runner(model, "auto", is_causal, enforce_eager=True).execute(pack(seqs)).wait()
        assert cosines(runs[-1], eager).min() >= 0.9999
