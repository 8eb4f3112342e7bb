"""Every architecture of tests/models/test_architectures.py on CUDA: bf16, CUDA graphs, the attention
that --attention-backend auto picks and the fused kernels (the defaults), against
sentence-transformers in fp32 on the same weights.

Self-contained: each test builds its tiny checkpoint (saved by sentence-transformers) in a
temporary directory. Tolerances (cosine per vector): bf16 engine vs the fp32 reference
>= 0.999, or no worse than sentence-transformers' own bf16 on the device where that is below
0.999 (a tiny random checkpoint with large activations, e.g. EmbeddingGemma's two Dense
layers after mean pooling, can lose more to bf16 than a trained model); graph replay vs the
eager run of the same padded shapes >= 0.99999 (same kernels); graphs vs --enforce-eager
>= 0.9998 (other GEMM shapes, and under `auto` the graphs may run the packed attention
kernel where the eager engine runs varlen, so bf16 rounding differs a little). Attention a
backend cannot run exactly is refused by name.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.models.test_architectures import SPECS, checkpoint, corpus, cosines, texts  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def _engine(path, **overrides):
    from rose_embed.engine.contract.config import EngineConfig
    from rose_embed.engine.rose.engine import Engine

    return Engine(EngineConfig(model=str(path), device="cuda", max_batch_tokens=2048, **overrides))


def test_bf16_graphs_match_sentence_transformers(checkpoint, texts):
    from sentence_transformers import SentenceTransformer

    arch, path = checkpoint
    reference = SentenceTransformer(str(path), device="cpu").encode(texts, convert_to_numpy=True)
    their_bf16 = SentenceTransformer(str(path), device="cuda", model_kwargs={"dtype": torch.bfloat16}).encode(
        texts, convert_to_numpy=True)
    bf16_tolerance = min(0.999, float(cosines(their_bf16, reference).min()))
    engine = _engine(path)
    assert engine.spec.architecture == SPECS[arch].architecture and engine.dtype == torch.bfloat16
    # auto where the packed kernel can run the shape too; varlen alone for windows and bias.
    assert engine.runner.graphs is not None and engine.runner.attention.name in ("auto", "varlen")
    engine.warm_up()
    # Each bucket's first batch runs eagerly on the padded shapes, its second is captured,
    # later ones replay the graph.
    runs = [engine.embed(texts) for _ in range(3)]
    assert engine.runner.num_graph_replays > 0
    for out in runs:
        assert out.shape == reference.shape
        assert cosines(out, reference).min() >= bf16_tolerance, arch
    assert cosines(runs[-1], runs[0]).min() >= 0.99999
    eager = _engine(path, enforce_eager=True).embed(texts)
    assert cosines(eager, reference).min() >= bf16_tolerance
    assert cosines(runs[-1], eager).min() >= 0.9998
    assert np.allclose(np.linalg.norm(runs[-1], axis=1), 1.0, atol=1e-4)
    # The PyTorch references of the fused kernels (--no-fused-kernels) on the device too;
    # last, since the switch is process-wide.
    unfused = _engine(path, fused_kernels=False).embed(texts)
    assert cosines(unfused, reference).min() >= bf16_tolerance
    print(f"{arch}: bf16 tolerance {bf16_tolerance:.5f}, ours {cosines(runs[-1], reference).min():.5f}")


@pytest.mark.parametrize("arch,refusal", [("mpnet", "relative position bias"), ("modernbert", "sliding-window"),
                                          ("gemma3", "sliding-window"), ("mistral", "sliding-window")])
def test_flashinfer_refuses_what_it_cannot_run_exactly(arch, refusal, tmp_path):
    path = SPECS[arch].save(tmp_path / "model")
    with pytest.raises(ValueError, match=refusal):
        _engine(path, attention_backend="flashinfer")
