"""A ColBERT model whose queries' [MASK]s it does not attend to (attend_to_expansion_tokens false,
PyLate's default) on CUDA. The GPU's own attention kernels (auto, varlen, packed, FlashInfer) and their
CUDA graphs cannot hide keys: a batch whose queries hide some runs eagerly on one exact SDPA call per
sequence (engine/rose/engine.py's hidden_keys_backend), documents on the backend asked for and its graphs.

Tolerance: float32 on the device against the float32 reference on the CPU within 1e-4 (the CPU's own
tolerance, tests/models/test_colbert_models.py), queries and documents in one batch; with default flags
(bf16, graphs) each token vector's cosine to the reference >= 0.999, as the other ColBERT GPU tests.

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


def _batch_vectors(engine, texts):
    from rose_embed.engine.contract.batch import pack

    queries, documents = engine.colbert.encode(texts, True), engine.colbert.encode(texts, False)
    assert any((ids < 0).any() for ids in queries[0])  # some queries hide [MASK]s
    seqs, segments = queries[0] + documents[0], queries[1] + documents[1]
    rows = engine.execute_packed(pack(seqs, segments)).wait()
    counts = [int(ids.max()) + 1 for ids in segments]
    assert rows.shape == (sum(counts), PROJECTION_DIM)
    return np.split(rows, np.cumsum(counts)[:-1])


@pytest.mark.parametrize("attention_backend", ["packed", "sdpa"])
def test_float32_vectors_equal_pylate(hidden, attention_backend):
    from rose_embed.engine.contract.config import EngineConfig
    from rose_embed.engine.rose.engine import Engine

    config = EngineConfig(model=str(hidden), device="cuda", dtype="float32", attention_backend=attention_backend)
    engine = Engine(config)
    texts = texts_with_edges(10, 4)
    got = _batch_vectors(engine, texts)
    expected = reference_vectors(hidden, texts, True) + reference_vectors(hidden, texts, False)
    for i, (ours, theirs) in enumerate(zip(got, expected, strict=True)):
        assert ours.shape == theirs.shape, f"text {i}"
        np.testing.assert_allclose(ours, theirs, atol=TOLERANCE, rtol=0, err_msg=f"text {i}")


def test_default_flags_serve_it_documents_in_graphs(hidden):
    from rose_embed.engine.contract.config import EngineConfig
    from rose_embed.engine.rose.engine import Engine

    engine = Engine(EngineConfig(model=str(hidden), device="cuda"))
    assert engine.dtype == torch.bfloat16 and engine.runner.graphs is not None
    engine.warm_up()
    texts = texts_with_edges(10, 4)
    expected = reference_vectors(hidden, texts, True) + reference_vectors(hidden, texts, False)
    for _ in range(3):  # each bucket's first batch eager, its second captured, later ones replay
        got = _batch_vectors(engine, texts)
        documents = engine.colbert.encode(texts, False)
        engine.execute_packed(pack_documents(documents)).wait()
    assert engine.runner.num_graph_replays > 0 and engine.runner.num_capture_failures == 0
    for i, (ours, theirs) in enumerate(zip(got, expected, strict=True)):
        assert ours.shape == theirs.shape, f"text {i}"
        cosines = (ours * theirs).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(theirs, axis=1)
        assert cosines.min() >= 0.999, (i, float(cosines.min()))


def pack_documents(documents):
    from rose_embed.engine.contract.batch import pack

    return pack(*documents)
