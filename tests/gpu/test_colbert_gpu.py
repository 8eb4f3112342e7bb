"""ColBERT (PyLate) models on CUDA in bf16, in CUDA graphs, against their float32 reference on the CPU.

A tiny random BERT ColBERT saved as PyLate saves one (tests/support/colbert_checkpoints.py), run by the
engine on the device (bf16, graphs, the attention `auto` picks) and by one real server with default
flags, against the transcription of PyLate's encode on the CPU in float32. Every kept token is a
pooling segment, so a batch's graph key counts its tokens' vectors: the head must be captured with
the model (no capture failure) and replay what its eager run gave.

Tolerance (absolute, on each coordinate of each unit token vector): at least 0.02, or three times the
same modules' own bf16 error on the device where that is larger, as tests/gpu/test_sparse_gpu.py
states; MaxSim scores (a sum over query_length tokens) within query_length times that. Graph replay
against the first (eager) run of the same shapes: 1e-3.

GPU tests are marked `gpu` and skipped without CUDA.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import numpy as np
import pytest
import torch

from tests.conftest import ServerProcess, texts_with_edges
from tests.support.colbert_checkpoints import GPU_QUERY_LENGTH as QUERY_LENGTH
from tests.support.colbert_checkpoints import PROJECTION_DIM, maxsim, reference_vectors
from tests.support.gpu_tolerance import REPLAY_TOLERANCE, bf16_tolerance

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

DEVICE = "cuda"
LEAST_TOLERANCE = 0.02


def _texts() -> list[str]:
    """At most 23 x 128 tokens: one batch within the engine test's caps, whichever side."""
    return texts_with_edges(20, 10)



def _references(path, texts: list[str], is_query: bool) -> tuple[list[np.ndarray], float]:
    expected = reference_vectors(path, texts, is_query)
    theirs = reference_vectors(path, texts, is_query, DEVICE, torch.bfloat16)
    their_error = max(float(np.abs(t - e).max()) for t, e in zip(theirs, expected))
    return expected, bf16_tolerance(their_error, LEAST_TOLERANCE)


def _worst(got: list[np.ndarray], expected: list[np.ndarray], tolerance: float) -> float:
    worst = 0.0
    for i, (ours, theirs) in enumerate(zip(got, expected, strict=True)):
        assert ours.shape == theirs.shape, f"text {i}"
        worst = max(worst, float(np.abs(ours - theirs).max()))
    assert worst <= tolerance, (worst, tolerance)
    return worst


def test_engine_vectors_in_bf16_graphs_match_the_fp32_reference(colbert):
    from rose_embed.engine.contract.batch import pack
    from rose_embed.engine.contract.config import EngineConfig
    from rose_embed.engine.rose.engine import Engine

    texts = _texts()
    engine = Engine(EngineConfig(model=str(colbert), device=DEVICE, max_batch_tokens=4096, max_batch_seqs=4096))
    assert engine.dtype == torch.bfloat16 and engine.runner.graphs is not None
    engine.warm_up()
    vectors = {}
    for is_query in (True, False):
        seqs, segments = engine.colbert.encode(texts, is_query)
        counts = np.cumsum([int(ids.max()) + 1 for ids in segments])[:-1]
        # Each bucket's first batch runs eagerly, its second is captured, later ones replay.
        runs = [np.split(engine.execute_packed(pack(seqs, segments)).wait(), counts) for _ in range(3)]
        expected, tolerance = _references(colbert, texts, is_query)
        worst = max(_worst(run, expected, tolerance) for run in runs)
        for first, last in zip(runs[0], runs[-1]):
            np.testing.assert_allclose(last, first, atol=REPLAY_TOLERANCE, rtol=0)
        print(f"{'query' if is_query else 'document'}: tolerance {tolerance:.4f}, ours {worst:.4f}")
        vectors[is_query] = (runs[-1], expected, tolerance)
    assert engine.runner.num_graph_replays > 0 and engine.runner.num_capture_failures == 0
    (queries, want_queries, tolerance), (documents, want_documents, _) = vectors[True], vectors[False]
    for query, want in zip(queries[:5], want_queries[:5]):
        np.testing.assert_allclose(maxsim(query, documents), maxsim(want, want_documents),
                                   atol=QUERY_LENGTH * tolerance, rtol=0)


@pytest.fixture(scope="module")
def server(colbert) -> Iterator[ServerProcess]:
    """The model behind a server with default flags: on a GPU machine, bf16 and graphs."""
    proc = ServerProcess(f"--model=colbert={colbert}", ready_timeout=600)
    yield proc
    proc.stop()


@pytest.mark.parametrize("side", ["query", "document"])
def test_served_vectors_in_bf16_match_the_fp32_reference(colbert, server, side):
    texts = _texts()
    expected, tolerance = _references(colbert, texts, side == "query")
    r = httpx.post(server.url + "/v1/embeddings", json={"model": "colbert", "input": texts, "input_type": side},
                   timeout=120)
    assert r.status_code == 200, r.text
    got = [np.asarray(d["embedding"], dtype=np.float32).reshape(-1, PROJECTION_DIM) for d in r.json()["data"]]
    _worst(got, expected, tolerance)
