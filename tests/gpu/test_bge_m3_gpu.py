"""BGE-M3 on CUDA in bf16, in CUDA graphs, against FlagEmbedding's float32 outputs on the CPU.

A tiny random checkpoint in BAAI/bge-m3's layout (tests/support/bge_m3_checkpoints.py), run by the engine on
the device (bf16, graphs, the attention `auto` picks) with every token a pooling segment and with one
segment per text, and by one real server with default flags through /v1/embeddings with all three
outputs, against the transcription of FlagEmbedding's encode on the CPU in float32.

Tolerance (absolute, per coordinate of the unit dense and token vectors, and per token id's lexical
weight, an id missing on one side counting as weight 0: a weight near zero may fall either side of the
relu in bf16): at least 0.02, or three times the same modules' own bf16 error on the device where that
is larger (tests/support/gpu_tolerance.py). Graph replay against the first (eager) run of the same
shapes: 1e-3; the dense layout's rows equal the token layout's first rows within the same.

GPU tests are marked `gpu` and skipped without CUDA.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import numpy as np
import pytest
import torch

from tests.conftest import ServerProcess, texts_with_edges
from tests.support.bge_m3_checkpoints import HIDDEN, reference_outputs, save_bge_m3
from tests.support.gpu_tolerance import REPLAY_TOLERANCE, bf16_tolerance

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

DEVICE = "cuda"
LEAST_TOLERANCE = 0.02
MAX_SEQ_LEN = 128


def _texts() -> list[str]:
    return texts_with_edges(20, 10)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    return save_bge_m3(tmp_path_factory.mktemp("bge-m3") / "m3", max_seq_length=MAX_SEQ_LEN)


def _sparse_gap(ours: dict[int, float], theirs: dict[str, float]) -> float:
    ids = set(ours) | {int(k) for k in theirs}
    return max((abs(ours.get(i, 0.0) - theirs.get(str(i), 0.0)) for i in ids), default=0.0)


def _gaps(dense, sparse, colbert, reference) -> dict[str, float]:
    """The largest difference of each output from `reference` (reference_outputs' dict)."""
    gaps = {"dense": float(np.abs(np.asarray(dense) - np.stack(reference["dense_vecs"])).max())}
    gaps["sparse"] = max(_sparse_gap(ours, theirs) for ours, theirs in zip(sparse, reference["lexical_weights"]))
    worst = 0.0
    for i, (ours, theirs) in enumerate(zip(colbert, reference["colbert_vecs"], strict=True)):
        assert ours.shape == theirs.shape, f"text {i}"
        worst = max(worst, float(np.abs(ours - theirs).max()))
    gaps["colbert"] = worst
    return gaps


@pytest.fixture(scope="module")
def expected(saved) -> tuple[dict, dict[str, float]]:
    """FlagEmbedding's fp32 outputs on the CPU, and each output's tolerance from its own bf16 error on the device."""
    texts = _texts()
    reference = reference_outputs(saved, texts, max_length=MAX_SEQ_LEN)
    theirs = reference_outputs(saved, texts, max_length=MAX_SEQ_LEN, device=DEVICE, dtype=torch.bfloat16)
    sparse = [{int(k): float(v) for k, v in weights.items()} for weights in theirs["lexical_weights"]]
    their_gaps = _gaps(theirs["dense_vecs"], sparse, theirs["colbert_vecs"], reference)
    return reference, {name: bf16_tolerance(gap, LEAST_TOLERANCE) for name, gap in their_gaps.items()}


def test_engine_outputs_in_bf16_graphs_match_the_fp32_reference(saved, expected):
    from rose_embed.engine.contract import m3_rows
    from rose_embed.engine.contract.batch import pack
    from rose_embed.engine.contract.config import EngineConfig
    from rose_embed.engine.rose.engine import Engine

    reference, tolerances = expected
    engine = Engine(EngineConfig(model=str(saved), device=DEVICE, max_batch_tokens=4096, max_batch_seqs=4096))
    assert engine.dtype == torch.bfloat16 and engine.runner.graphs is not None
    m3 = engine.spec.m3
    seqs = engine.tokenize(_texts())
    segments = [m3_rows.token_segments(seq) for seq in seqs]
    # Each bucket's first batch runs eagerly, its second is captured, later ones replay.
    runs = [engine.execute_packed(pack(seqs, segments)).wait() for _ in range(3)]
    np.testing.assert_allclose(runs[-1], runs[0], atol=REPLAY_TOLERANCE, rtol=0)
    per_text = np.split(runs[-1], np.cumsum([len(seq) for seq in seqs])[:-1])
    dense = [rows[0, :m3.dense_dim] for rows in per_text]
    sparse = [dict(zip(*(a.tolist() for a in m3_rows.lexical_weights(seq, rows, m3.unused_ids))))
              for seq, rows in zip(seqs, per_text)]
    colbert = [m3_rows.colbert_vectors(rows, m3.colbert_dim) for rows in per_text]
    gaps = _gaps(dense, sparse, colbert, reference)
    print(f"tolerances {tolerances}, ours {gaps}")
    assert all(gaps[name] <= tolerances[name] for name in gaps), (gaps, tolerances)
    dense_layout = [engine.execute_packed(pack(seqs)).wait() for _ in range(3)][-1]
    np.testing.assert_allclose(dense_layout[:, :m3.dense_dim], np.stack(dense), atol=REPLAY_TOLERANCE, rtol=0)
    assert engine.runner.num_graph_replays > 0 and engine.runner.num_capture_failures == 0


@pytest.fixture(scope="module")
def server(saved) -> Iterator[ServerProcess]:
    """The model behind a server with default flags: on a GPU machine, bf16 and graphs."""
    proc = ServerProcess(f"--model=m3={saved}", ready_timeout=600)
    yield proc
    proc.stop()


def test_served_outputs_in_bf16_match_the_fp32_reference(server, expected):
    reference, tolerances = expected
    r = httpx.post(server.url + "/v1/embeddings", json={"model": "m3", "input": _texts(),
                                                        "outputs": ["dense", "sparse", "colbert"]}, timeout=120)
    assert r.status_code == 200, r.text
    data = r.json()["data"]
    sparse = [dict(zip(d["sparse"]["indices"], d["sparse"]["values"])) for d in data]
    colbert = [np.asarray(d["colbert"], dtype=np.float32).reshape(-1, HIDDEN) for d in data]
    gaps = _gaps([d["dense"] for d in data], sparse, colbert, reference)
    assert all(gaps[name] <= tolerances[name] for name in gaps), (gaps, tolerances)
