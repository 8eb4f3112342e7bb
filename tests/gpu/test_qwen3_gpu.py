"""The Qwen3 layers on CUDA: bf16 parity with transformers and CUDA-graph capture.

Skipped without CUDA. Every attention backend present is tried: the per-sequence SDPA
one, and torch's varlen_attn and FlashInfer where engine/rose/attention/cuda.py (the
GPU path) and the flashinfer package exist. What this checks is that the model's own
code runs on the device in bf16 under each backend, causal and bidirectional, and
contains no host synchronisation, so a whole-model graph can hold it.
Tolerances: pooled-vector cosine >= 0.999 for bf16 against the fp32 reference; graph
replay equals eager exactly (same kernels, same inputs).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rose_embed.engine.contract.batch import pack
from rose_embed.engine.rose.attention.ragged import SDPAPerSequenceBackend
from rose_embed.engine.rose.layers.pooling import pool
from tests.models.test_qwen3_model import _models

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]
HEAD_DIM = 64  # FlashInfer's smallest


def _backend(name: str, shape):
    if name == "sdpa":
        return SDPAPerSequenceBackend(shape)
    cuda = pytest.importorskip("rose_embed.engine.rose.attention.cuda")
    if name == "flashinfer" and not cuda.flashinfer_available():
        pytest.skip("flashinfer is not installed")
    return cuda.make_cuda_attention_backend(name, shape, torch.device("cuda"), torch.bfloat16)


def _batch(seed: int, lengths=(1, 9, 64, 128, 30)):
    rng = np.random.default_rng(seed)
    return pack([rng.integers(0, 97, n).astype(np.int32) for n in lengths])


def _to_cuda(batch):
    return [torch.from_numpy(a).cuda() for a in (batch.input_ids, batch.positions, batch.cu_seqlens)]


@pytest.mark.parametrize("backend", ["sdpa", "varlen", "packed", "flashinfer"])
@pytest.mark.parametrize("is_causal,pooling", [(True, "last"), (False, "mean")])
@torch.no_grad()
def test_bf16_on_cuda_matches_fp32_reference(backend, is_causal, pooling):
    hf, ours = _models(head_dim=HEAD_DIM)
    model = ours.to(device="cuda", dtype=torch.bfloat16)
    attention = _backend(backend, model.attention_shape(is_causal))
    batch = _batch(0)
    input_ids, positions, cu_seqlens = _to_cuda(batch)
    meta = attention.prepare(cu_seqlens, batch.cu_seqlens.tolist(), batch.max_seqlen)
    ours_vec = pool(model(input_ids, positions, attention, meta), cu_seqlens, pooling).cpu().double()
    refs = []
    for i in range(batch.num_seqs):
        ids = torch.from_numpy(batch.input_ids[batch.cu_seqlens[i]:batch.cu_seqlens[i + 1]]).long()[None]
        mask = None if is_causal else torch.zeros(1, 1, ids.shape[1], ids.shape[1])
        h = hf(input_ids=ids, attention_mask=mask).last_hidden_state[0]
        refs.append(h[-1] if pooling == "last" else h.mean(0))
    cos = torch.nn.functional.cosine_similarity(ours_vec, torch.stack(refs).double(), dim=-1)
    assert cos.min().item() >= 0.999, cos


@pytest.mark.parametrize("backend", ["sdpa", "varlen", "packed"])
@torch.no_grad()
def test_model_is_capturable_in_a_cuda_graph(backend):
    _, ours = _models(head_dim=HEAD_DIM)
    model = ours.to(device="cuda", dtype=torch.bfloat16)
    attention = _backend(backend, model.attention_shape(True))
    first, second = _batch(1), _batch(2)  # same lengths, other tokens
    input_ids, positions, cu_seqlens = _to_cuda(first)
    meta = attention.prepare(cu_seqlens, first.cu_seqlens.tolist(), first.max_seqlen)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up outside the graph, as capture requires
        model(input_ids, positions, attention, meta)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = model(input_ids, positions, attention, meta)
    input_ids.copy_(torch.from_numpy(second.input_ids))
    graph.replay()
    eager = model(input_ids, positions, attention, meta)
    torch.testing.assert_close(static_out, eager, atol=0, rtol=0)
