"""Sparse encoders (SPLADE) on CUDA in bf16, in CUDA graphs, against their float32 reference on the CPU.

Tiny random BERT and DistilBERT MLMs made as sparse as trained ones and saved by SparseEncoder.save
(tests/support/sparse_checkpoints.py), run by the engine on the device (bf16, graphs, the attention
`auto` picks) and by one real server with default flags, against `SparseEncoder.encode` on the CPU
in float32. The head must be captured with the model (no capture failure: nothing in it waits on
the host) and replay what its eager run gave.

Tolerance (absolute, on each value of the vector, a dimension absent from one side counting as 0):
at least 0.02, or three times sentence-transformers' own bf16 error on the device where that is
larger, as tests/gpu/test_rerank_gpu.py states for scores. Indices: the two sides' sets may differ
only in dimensions whose reference value is within the tolerance of 0 (a logit near 0 may round
to either side of the relu), and a top-k only in dimensions within the tolerance of its k-th
value. Graph replay against the first (eager) run of the same shapes: 1e-3.

GPU tests are marked `gpu` and skipped without CUDA.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch

from tests.conftest import ServerProcess, load_texts
from tests.support.gpu_tolerance import REPLAY_TOLERANCE, bf16_tolerance
from tests.support.sparse_checkpoints import save_sparse_encoder

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

DEVICE = "cuda"
LEAST_TOLERANCE = 0.02
TOP_K = 16
CASES = {"bert-max": ("bert", "max", None), "bert-sum-top-k": ("bert", "sum", TOP_K),
         "distilbert-max": ("distilbert", "max", None)}


def _texts() -> list[str]:
    texts = load_texts(40)
    return [*texts, "", "  spaced   text  ", " ".join(texts[:20])]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sparse")
    return {case: save_sparse_encoder(root / case, name, pooling=pooling, max_active_dims=top_k)
            for case, (name, pooling, top_k) in CASES.items()}


def _dense(pairs, vocab_size: int) -> np.ndarray:
    """[(indices, values)] -> [N, V] float64, absent dimensions 0."""
    out = np.zeros((len(pairs), vocab_size))
    for row, (indices, values) in zip(out, pairs):
        row[np.asarray(indices, np.int64)] = values
    return out


def _references(path: Path, texts: list[str]) -> tuple[np.ndarray, float]:
    """(float32 vectors on the CPU [N, V], the tolerance on a value)."""
    from sentence_transformers import SparseEncoder

    expected = SparseEncoder(str(path), device="cpu").encode(texts).to_dense().double().numpy()
    theirs = SparseEncoder(str(path), device=DEVICE, model_kwargs={"dtype": torch.bfloat16}).encode(texts)
    their_error = float(np.abs(theirs.to_dense().double().cpu().numpy() - expected).max())
    return expected, bf16_tolerance(their_error, LEAST_TOLERANCE)


def _check(got: np.ndarray, expected: np.ndarray, tolerance: float, top_k: int | None, name: str) -> float:
    error = np.abs(got - expected)
    assert error.max() <= tolerance, (name, float(error.max()), tolerance)
    differ = (got > 0) != (expected > 0)
    if top_k is None:
        assert np.all(expected[differ] <= tolerance), name
    else:
        kth = -np.sort(-expected, axis=1)[:, top_k - 1 : top_k]  # each text's k-th value
        assert np.all(np.abs(expected - kth)[differ] <= tolerance), name
    return float(error.max())


@pytest.mark.parametrize("case", sorted(CASES))
def test_engine_pairs_in_bf16_graphs_match_the_fp32_reference(checkpoints, case):
    from rose_embed.engine.contract.config import EngineConfig
    from rose_embed.engine.contract.sparse_rows import read_rows
    from rose_embed.engine.rose.engine import Engine

    path, texts = checkpoints[case], _texts()
    expected, tolerance = _references(path, texts)
    engine = Engine(EngineConfig(model=str(path), device=DEVICE, max_batch_tokens=2048))
    assert engine.dtype == torch.bfloat16 and engine.runner.graphs is not None
    engine.warm_up()
    seqs = engine.tokenize(texts)
    # Each bucket's first batch runs eagerly, its second is captured, later ones replay.
    runs = [read_rows(engine.execute(seqs).wait()) for _ in range(3)]
    assert engine.runner.num_graph_replays > 0 and engine.runner.num_capture_failures == 0
    vocab_size = engine.spec.sparse.vocab_size
    dense = [_dense([(r.indices, r.values) for r in rows], vocab_size) for rows in runs]
    worst = max(_check(d, expected, tolerance, CASES[case][2], case) for d in dense)
    np.testing.assert_allclose(dense[-1], dense[0], atol=REPLAY_TOLERANCE, rtol=0)
    print(f"{case}: tolerance {tolerance:.4f}, ours {worst:.4f}")


@pytest.fixture(scope="module")
def sparse_server(checkpoints) -> Iterator[ServerProcess]:
    """Every case behind one server with default flags: on a GPU machine, bf16 and graphs."""
    proc = ServerProcess(*(f"--model={case}={path}" for case, path in checkpoints.items()), ready_timeout=600)
    yield proc
    proc.stop()


@pytest.mark.parametrize("case", sorted(CASES))
def test_served_pairs_in_bf16_match_the_fp32_reference(checkpoints, sparse_server, case):
    texts = _texts()
    expected, tolerance = _references(checkpoints[case], texts)
    r = httpx.post(sparse_server.url + "/embed_sparse", json={"model": case, "inputs": texts, "truncate": True},
                   timeout=120)
    assert r.status_code == 200, r.text
    pairs = [([p["index"] for p in text], [p["value"] for p in text]) for text in r.json()]
    _check(_dense(pairs, expected.shape[1]), expected, tolerance, CASES[case][2], case)
