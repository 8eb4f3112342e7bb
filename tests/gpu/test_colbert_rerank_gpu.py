"""A ColBERT (PyLate) model's MaxSim scores on CUDA in bf16, in CUDA graphs, against colbert_scores over
the float32 reference transcription of PyLate's encode on the CPU.

A tiny random BERT ColBERT saved as PyLate saves one (tests/support/colbert_checkpoints.py): the engine
scores several queries' groups (engine/text/colbert_groups.py) in one batch on the device; a real server
with default flags answers /v1/rerank.

Tolerance (absolute, on each score): query_length times the token vectors' tolerance of
tests/gpu/test_colbert_gpu.py (at least 0.02 per coordinate of a unit vector, or three times the same
modules' own bf16 error on the device where that is larger), as a score sums query_length dot products
of unit vectors. Graph replay against the first (eager) run of the same shapes: 1e-3.

GPU tests are marked `gpu` and skipped without CUDA.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import numpy as np
import pytest
import torch

from tests.conftest import ServerProcess, load_texts, texts_with_edges
from tests.support.colbert_checkpoints import GPU_QUERY_LENGTH as QUERY_LENGTH
from tests.support.colbert_checkpoints import maxsim, reference_vectors
from tests.support.gpu_tolerance import REPLAY_TOLERANCE, bf16_tolerance

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

DEVICE = "cuda"
LEAST_TOLERANCE = 0.02
QUERIES = ["How do I read a file line by line?", " ".join(load_texts(4)), ""]


def _documents() -> list[str]:
    return texts_with_edges(20, 10)



def _reference(path, queries: list[str], documents: list[str]) -> tuple[list[np.ndarray], float]:
    """colbert_scores per query over the float32 vectors, and the scores' tolerance."""
    documents_fp32 = reference_vectors(path, documents, False)
    their_error = max(float(np.abs(t - e).max()) for t, e in
                      zip(reference_vectors(path, documents, False, DEVICE, torch.bfloat16), documents_fp32))
    scores = [maxsim(reference_vectors(path, [q], True)[0], documents_fp32) for q in queries]
    return scores, QUERY_LENGTH * bf16_tolerance(their_error, LEAST_TOLERANCE)


def test_engine_scores_in_bf16_graphs_match_the_fp32_reference(colbert):
    from rose_embed.engine.contract.batch import pack
    from rose_embed.engine.contract.config import EngineConfig
    from rose_embed.engine.rose.engine import Engine
    from rose_embed.engine.text.colbert_groups import encode_rerank

    documents = _documents()
    engine = Engine(EngineConfig(model=str(colbert), device=DEVICE, max_batch_tokens=4096, max_batch_seqs=256))
    assert engine.dtype == torch.bfloat16 and engine.runner.graphs is not None
    engine.warm_up()
    seqs, segments = [], []
    for query in QUERIES:
        s, g = encode_rerank(engine.colbert, query, documents, None, 1024, 64)
        seqs += s
        segments += g
    batch = pack(seqs, segments)
    # Each bucket's first batch runs eagerly, its second is captured, later ones replay.
    runs = [engine.execute_packed(batch).wait() for _ in range(3)]
    assert engine.runner.num_graph_replays > 0 and engine.runner.num_capture_failures == 0
    np.testing.assert_allclose(runs[-1], runs[0], atol=REPLAY_TOLERANCE, rtol=0)
    expected, tolerance = _reference(colbert, QUERIES, documents)
    for run in runs:
        assert not run[:, 1:].any()  # one score per document comes back, no token vector
        for ours, want in zip(np.split(run[:, 0], len(QUERIES)), expected, strict=True):
            worst = float(np.abs(ours - want).max())
            assert worst <= tolerance, (worst, tolerance)
    print(f"scores: tolerance {tolerance:.4f}, ours {worst:.4f}")


@pytest.fixture(scope="module")
def server(colbert) -> Iterator[ServerProcess]:
    """The model behind a server with default flags: on a GPU machine, bf16 and graphs."""
    proc = ServerProcess(f"--model=colbert={colbert}", ready_timeout=600)
    yield proc
    proc.stop()


def test_served_scores_in_bf16_match_the_fp32_reference(colbert, server):
    documents = _documents()
    expected, tolerance = _reference(colbert, QUERIES[:1], documents)
    r = httpx.post(server.url + "/v1/rerank", json={"model": "colbert", "query": QUERIES[0], "documents": documents},
                   timeout=120)
    assert r.status_code == 200, r.text
    got = [res["relevance_score"] for res in sorted(r.json()["results"], key=lambda res: res["index"])]
    worst = float(np.abs(np.asarray(got) - expected[0]).max())
    assert worst <= tolerance, (worst, tolerance)
