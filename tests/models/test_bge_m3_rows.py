"""BGE-M3's rows as the engine computes them (engine/rose/layers/m3_head.py, engine/contract/m3_rows.py), on the
CPU in float32, against the transcription of FlagEmbedding's encode (tests/support/bge_m3_checkpoints.py)
within 1e-4.

A row is as wide as the wider of the dense and token vectors and a weight; a text's first token's row holds
the dense vector, every later token's its token vector, the rest zeros and the lexical weight last. One
batch mixes texts asked for their dense vector alone (one segment each) and texts asked for every output
(a segment per token), the same text in both layouts among them, across the CPU's pieces of a batch, for a
token vector as wide as the dense one, narrower and wider. A sequence whose first token is not the CLS
token keeps that token's lexical weight, as FlagEmbedding does.
"""

from __future__ import annotations

import numpy as np
import pytest

from rose_embed.engine.contract import m3_rows
from rose_embed.engine.contract.batch import pack
from rose_embed.engine.rose.runner import CPU_CHUNK_TOKENS
from tests.conftest import load_texts, texts_with_edges
from tests.support.bge_m3_checkpoints import (HIDDEN, as_pairs, reference_lexical_weights_of_ids,
                                              reference_outputs, save_bge_m3)

pytestmark = pytest.mark.slow  # loads engines

TOLERANCE = 1e-4
MAX_SEQ_LEN = 128
# BGE-M3's own shape (D = H), and token vectors narrower and wider than the dense one: each pads the other.
COLBERT_DIMS = [HIDDEN, HIDDEN // 2, HIDDEN + 16]


def _engine(path):
    from rose_embed.engine.contract.config import EngineConfig
    from rose_embed.engine.rose.engine import Engine

    return Engine(EngineConfig(model=str(path), device="cpu", dtype="float32"))


@pytest.fixture(scope="module", params=COLBERT_DIMS, ids=lambda dim: f"D={dim}")
def model(request, tmp_path_factory):
    path = save_bge_m3(tmp_path_factory.mktemp("bge-m3") / "m3", colbert_dim=request.param,
                       max_seq_length=MAX_SEQ_LEN)
    return path, _engine(path)


def test_a_row_is_as_wide_as_the_wider_vector_and_a_weight(model):
    _, engine = model
    m3 = engine.spec.m3
    width = max(m3.dense_dim, m3.colbert_dim) + 1
    assert m3_rows.row_width(m3.dense_dim, m3.colbert_dim) == engine.spec.embedding_dim == width
    if m3.colbert_dim == m3.dense_dim:  # BGE-M3's shape: one float past the vectors, half of both together
        assert width == max(m3.dense_dim, m3.colbert_dim + 1) == HIDDEN + 1
    seq = engine.tokenize(["a short text"])[0]
    assert engine.execute_packed(pack([seq], [m3_rows.token_segments(seq)])).wait().shape == (len(seq), width)
    assert engine.execute_packed(pack([seq])).wait().shape == (1, width)


def _split_rows(rows: np.ndarray, seqs: list[np.ndarray], per_token: list[bool]) -> list[np.ndarray]:
    counts = [len(seq) if tokens else 1 for seq, tokens in zip(seqs, per_token)]
    return np.split(rows, np.cumsum(counts)[:-1])


def test_a_batch_mixing_dense_only_and_all_output_texts_gives_each_its_parts(model):
    path, engine = model
    m3 = engine.spec.m3
    texts = texts_with_edges(40, 10)
    texts = texts + texts[::-1]  # each text twice: at i and at an index of the other parity, the other layout
    per_token = [i % 2 == 0 for i in range(len(texts))]
    seqs = engine.tokenize(texts)
    batch = pack(seqs, [m3_rows.token_segments(seq) if tokens else None for seq, tokens in zip(seqs, per_token)])
    assert batch.num_tokens > CPU_CHUNK_TOKENS  # the CPU runs it in several pieces
    rows = engine.execute_packed(batch).wait()
    assert rows.shape == (batch.num_outputs, m3_rows.row_width(m3.dense_dim, m3.colbert_dim))
    reference = reference_outputs(path, texts, max_length=MAX_SEQ_LEN)
    for i, (seq, tokens, text_rows) in enumerate(zip(seqs, per_token, _split_rows(rows, seqs, per_token))):
        np.testing.assert_allclose(m3_rows.dense_vectors(text_rows[:1], m3.dense_dim)[0], reference["dense_vecs"][i],
                                   atol=TOLERANCE, rtol=0, err_msg=f"text {i}")
        assert not text_rows[0, m3.dense_dim:-1].any(), f"text {i}: the first row is zeros past the dense vector"
        if not tokens:
            assert len(text_rows) == 1
            continue
        np.testing.assert_allclose(m3_rows.colbert_vectors(text_rows, m3.colbert_dim), reference["colbert_vecs"][i],
                                   atol=TOLERANCE, rtol=0, err_msg=f"text {i}")
        assert not text_rows[1:, m3.colbert_dim:-1].any(), f"text {i}: later rows are zeros past the token vector"
        ids, weights = m3_rows.lexical_weights(seq, text_rows, m3.unused_ids)
        expected_ids, expected_weights = as_pairs(reference["lexical_weights"][i])
        assert ids.tolist() == expected_ids.tolist(), f"text {i}"
        np.testing.assert_allclose(weights, expected_weights, atol=TOLERANCE, rtol=0, err_msg=f"text {i}")
    assert any(reference["lexical_weights"][i] for i in range(0, len(texts), 2))  # not all-zero sparse answers


@pytest.fixture(scope="module")
def narrow(tmp_path_factory):
    """Token vectors narrower than the dense one, so that no row has a float to spare past its vector; a seed
    whose sparse_linear weighs most texts' first word above zero."""
    path = save_bge_m3(tmp_path_factory.mktemp("bge-m3") / "m3", colbert_dim=HIDDEN // 2, seed=3,
                       max_seq_length=MAX_SEQ_LEN)
    return path, _engine(path)


def test_a_sequence_not_begun_by_the_cls_token_keeps_its_first_tokens_weight(narrow):
    path, engine = narrow
    m3 = engine.spec.m3
    exercised = 0
    for text in load_texts(12):
        seq = engine.tokenize([text])[0][1:]  # the CLS token left out: its first token is a word's
        assert int(seq[0]) not in m3.unused_ids
        rows = engine.execute_packed(pack([seq], [m3_rows.token_segments(seq)])).wait()
        ids, weights = m3_rows.lexical_weights(seq, rows, m3.unused_ids)
        expected_ids, expected_weights = as_pairs(reference_lexical_weights_of_ids(path, seq.tolist()))
        assert ids.tolist() == expected_ids.tolist(), text
        np.testing.assert_allclose(weights, expected_weights, atol=TOLERANCE, rtol=0, err_msg=text)
        without_first = m3_rows.lexical_weights(seq[1:], rows[1:], m3.unused_ids)
        exercised += without_first[0].tolist() != ids.tolist() or not np.allclose(without_first[1], weights)
    assert exercised  # some text's first token's weight is its id's in the answer: a row without it would differ
