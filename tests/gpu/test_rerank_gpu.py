"""Reranker scores on CUDA in bf16 against their fp32 references on the CPU.

Tiny random BERT, XLM-R and ModernBERT cross-encoders saved by sentence-transformers, scored
by the engine on the device (bf16, CUDA graphs, the attention `auto` picks) and by one real
server process with default flags, against `CrossEncoder.predict` on the CPU in fp32; a tiny
Qwen3 reranker against Qwen3-Reranker's model card computed with transformers in fp32
(tests/support/reranker_checkpoints.py). The documents include ones long enough that the pair is
truncated.

Tolerance (absolute, on the score the route answers: a probability from a sigmoid, or
p(yes) / (p(yes) + p(no)) for Qwen3): at least 0.01, or three times the reference library's
own bf16 error on the device where that is larger. bf16 keeps 8 bits of mantissa, so a
score carries the rounding of every layer, and a tiny random checkpoint with large
activations loses more than a trained one; our kernels round in other places than the
reference's (fused norms and epilogues, packed attention, other GEMM shapes), so ours may
land a small multiple of the reference's own bf16 error away, never more. The raw logit
(TEI's `raw_scores`) gets four times the score's tolerance: a sigmoid's slope is at most a
quarter. Graph replay against the first (eager) run of the same shapes: 1e-3.

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
from tests.support.reranker_checkpoints import CROSS_ENCODERS, qwen3_card_scores, save_cross_encoder, save_qwen3_reranker

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

DEVICE = "cuda"
LEAST_TOLERANCE = 0.01
RAW_FACTOR = 4  # 1 / the sigmoid's steepest slope
QWEN3 = "qwen3"


def _pairs() -> tuple[str, list[str]]:
    texts = load_texts(40)
    return texts[0][:300], [*texts[1:25], "", "  spaced   text  ", texts[5] * 4]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("rerankers")
    saved = {name: save_cross_encoder(root / name, name) for name in sorted(CROSS_ENCODERS)}
    return {**saved, QWEN3: save_qwen3_reranker(root / QWEN3)}


def _max_seq_len(path: Path) -> int:
    from rose_embed.engine.model_files.loader import load_spec

    return load_spec(str(path)).max_seq_len


def _references(name: str, path: Path, query: str, documents: list[str]):
    """(fp32 scores on the CPU, fp32 raw logits or None, the tolerance on a score)."""
    if name == QWEN3:
        expected = np.asarray(qwen3_card_scores(path, query, documents, _max_seq_len(path)))
        theirs = np.asarray(qwen3_card_scores(path, query, documents, _max_seq_len(path), dtype=torch.bfloat16,
                                              device=DEVICE))
        raw = None
    else:
        from sentence_transformers import CrossEncoder

        pairs = [(query, d) for d in documents]
        reference = CrossEncoder(str(path), device="cpu")
        expected = reference.predict(pairs)
        raw = reference.predict(pairs, activation_fn=torch.nn.Identity())
        theirs = CrossEncoder(str(path), device=DEVICE, model_kwargs={"dtype": torch.bfloat16}).predict(pairs)
    their_error = float(np.abs(np.asarray(theirs, np.float64) - expected).max())
    tolerance = bf16_tolerance(their_error, LEAST_TOLERANCE)
    # The scores must differ by more than the tolerance, or a mixed-up pair could pass.
    assert np.ptp(expected) > 2 * tolerance, (name, np.ptp(expected), tolerance)
    return expected, raw, tolerance


@pytest.mark.parametrize("name", [*sorted(CROSS_ENCODERS), QWEN3])
def test_engine_scores_in_bf16_match_the_fp32_reference(checkpoints, name):
    from rose_embed.engine.contract.config import EngineConfig
    from rose_embed.engine.rose.engine import Engine

    path = checkpoints[name]
    query, documents = _pairs()
    expected, raw, tolerance = _references(name, path, query, documents)
    engine = Engine(EngineConfig(model=str(path), device=DEVICE, max_batch_tokens=2048))
    assert engine.dtype == torch.bfloat16 and engine.runner.graphs is not None
    engine.warm_up()
    pairs = engine.pairs.encode(query, documents)
    assert pairs.truncated, "no pair reached the limit: truncation went untested"
    # Each bucket's first batch runs eagerly, its second is captured, later ones replay.
    runs = [np.asarray(engine.execute(pairs.seqs).wait()) for _ in range(3)]
    assert engine.runner.num_graph_replays > 0
    for scores in runs:
        np.testing.assert_allclose(scores[:, 0], expected, atol=tolerance, rtol=0, err_msg=name)
        if raw is not None:
            np.testing.assert_allclose(scores[:, 1], raw, atol=RAW_FACTOR * tolerance, rtol=0, err_msg=name)
    np.testing.assert_allclose(runs[-1], runs[0], atol=REPLAY_TOLERANCE, rtol=0)
    worst = np.abs(runs[-1][:, 0] - expected).max()
    print(f"{name}: tolerance {tolerance:.4f}, ours {worst:.4f}")


@pytest.fixture(scope="module")
def rerank_server(checkpoints) -> Iterator[ServerProcess]:
    """Every reranker behind one server with default flags: on a GPU machine, bf16 and graphs."""
    models = [f"--model={name}={path}" for name, path in checkpoints.items()]
    proc = ServerProcess(*models, ready_timeout=600)
    yield proc
    proc.stop()


@pytest.mark.parametrize("name", [*sorted(CROSS_ENCODERS), QWEN3])
def test_served_scores_in_bf16_match_the_fp32_reference(checkpoints, rerank_server, name):
    query, documents = _pairs()
    expected, raw, tolerance = _references(name, checkpoints[name], query, documents)
    r = httpx.post(rerank_server.url + "/v1/rerank", json={"model": name, "query": query, "documents": documents},
                   timeout=120)
    assert r.status_code == 200, r.text
    got = {result["index"]: result["relevance_score"] for result in r.json()["results"]}
    np.testing.assert_allclose([got[i] for i in range(len(documents))], expected, atol=tolerance, rtol=0,
                               err_msg=name)
    if raw is not None:  # TEI's body: the logit before the activation
        r = httpx.post(rerank_server.url + "/rerank", json={"model": name, "query": query, "texts": documents,
                                                     "raw_scores": True, "truncate": True}, timeout=120)
        assert r.status_code == 200, r.text
        got = {rank["index"]: rank["score"] for rank in r.json()}
        np.testing.assert_allclose([got[i] for i in range(len(documents))], raw, atol=RAW_FACTOR * tolerance,
                                   rtol=0, err_msg=name)
