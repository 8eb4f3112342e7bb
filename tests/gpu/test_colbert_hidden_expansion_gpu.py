"""A ColBERT model whose queries' [MASK]s it does not attend to (attend_to_expansion_tokens false,
PyLate's default) on CUDA: the GPU's own attention kernels (auto, varlen, packed, FlashInfer) and their
CUDA graphs cannot hide keys, so the engine refuses the model on them by name; with
--attention-backend sdpa (one exact SDPA call per sequence, eager) it serves it.

Tolerance: float32 on the device against the float32 reference on the CPU within 1e-4 (the CPU's own
tolerance, tests/models/test_colbert_models.py), queries and documents in one batch.

GPU tests are marked `gpu` and skipped without CUDA.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.conftest import texts_with_edges
from tests.support.colbert_checkpoints import PROJECTION_DIM, reference_vectors, save_colbert

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def hidden(tmp_path_factory):
    return save_colbert(tmp_path_factory.mktemp("colbert") / "colbert", attend_to_expansion_tokens=False)


@pytest.mark.parametrize("attention_backend", ["auto", "varlen", "packed"])
def test_the_gpus_kernels_refuse_it_by_name(hidden, attention_backend):
    from rose_embed.engine.contract.config import EngineConfig
    from rose_embed.engine.rose.engine import Engine

    dtype = "float32" if attention_backend == "packed" else "bfloat16"
    with pytest.raises(ValueError, match="attend_to_expansion_tokens false.*--attention-backend sdpa"):
        Engine(EngineConfig(model=str(hidden), device="cuda", dtype=dtype, attention_backend=attention_backend))


def test_sdpa_serves_it_exactly(hidden):
    from rose_embed.engine.contract.batch import pack
    from rose_embed.engine.contract.config import EngineConfig
    from rose_embed.engine.rose.engine import Engine

    engine = Engine(EngineConfig(model=str(hidden), device="cuda", dtype="float32", attention_backend="sdpa"))
    texts = texts_with_edges(10, 4)
    queries, documents = engine.colbert.encode(texts, True), engine.colbert.encode(texts, False)
    assert any((ids < 0).any() for ids in queries[0])  # some queries hide [MASK]s
    seqs, segments = queries[0] + documents[0], queries[1] + documents[1]
    rows = engine.execute_packed(pack(seqs, segments)).wait()
    counts = [int(ids.max()) + 1 for ids in segments]
    assert rows.shape == (sum(counts), PROJECTION_DIM)
    got = np.split(rows, np.cumsum(counts)[:-1])
    expected = reference_vectors(hidden, texts, True) + reference_vectors(hidden, texts, False)
    for i, (ours, theirs) in enumerate(zip(got, expected, strict=True)):
        assert ours.shape == theirs.shape, f"text {i}"
        np.testing.assert_allclose(ours, theirs, atol=TOLERANCE, rtol=0, err_msg=f"text {i}")
