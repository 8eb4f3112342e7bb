"""Sparse encoders (SPLADE) on the CPU in float32 against SparseEncoder.encode, within 1e-4.

Tiny random MLMs (BERT, DistilBERT, XLM-R), made as sparse as trained ones and saved by
SparseEncoder.save (tests/support/sparse_checkpoints.py): each text's (index, value) pairs from
the engine's rows have the same indices as `SparseEncoder(path).encode`'s sparse tensor and values
within 1e-4, for max and sum pooling and both activations, in one packed batch of texts of many
lengths (some cut at the model's limit). A top-k (max_active_dims, the checkpoint's or the
server's) keeps the same values as encode's; a text with more non-zeros than its row holds says
so (its count) and keeps its largest values. An inference-free encoder (a Router) computes its
documents with the engine as encode_document does and its queries by lookup as encode_query does.
"""

from __future__ import annotations

import numpy as np
import pytest

from rose_embed.engine.contract.sparse_rows import read_rows
from rose_embed.engine.model_files.sparse import MAX_UNCUT_DIMS
from tests.conftest import load_texts
from tests.support.sparse_checkpoints import reference_pairs, save_inference_free, save_sparse_encoder

pytestmark = pytest.mark.slow  # loads engines

TOLERANCE = 1e-4


def _texts() -> list[str]:
    texts = load_texts(20)
    return [*texts, "", "  spaced   text  ", "SPLADE", " ".join(texts)]


def _engine(path, max_active_dims: int | None = None):
    from rose_embed.engine.contract.config import EngineConfig, ModelOverrides
    from rose_embed.engine.rose.engine import Engine

    return Engine(EngineConfig(model=str(path), device="cpu", dtype="float32",
                               model_overrides=ModelOverrides(max_active_dims=max_active_dims)))


def _rows(engine, texts: list[str]):
    return read_rows(engine.execute(engine.tokenize(texts)).wait())


def _assert_same(rows, expected) -> None:
    for i, (row, (indices, values)) in enumerate(zip(rows, expected, strict=True)):
        np.testing.assert_array_equal(row.indices, indices, err_msg=f"text {i}: other indices")
        np.testing.assert_allclose(row.values, values, atol=TOLERANCE, rtol=0, err_msg=f"text {i}")


@pytest.mark.parametrize("name,pooling,activation", [("bert", "max", "relu"), ("bert", "sum", "log1p_relu"),
                                                     ("distilbert", "max", "log1p_relu"),
                                                     ("xlm-roberta", "sum", "relu")])
def test_pairs_equal_sparse_encoder(tmp_path, name, pooling, activation):
    path = save_sparse_encoder(tmp_path / name, name, pooling=pooling, activation=activation)
    texts = _texts()
    engine = _engine(path)
    assert engine.spec.sparse.pooling == pooling and engine.spec.sparse.activation == activation
    rows = _rows(engine, texts)
    expected = reference_pairs(path, texts)
    assert max(len(indices) for indices, _ in expected) >= 40, "too few non-zeros for a mix-up to show"
    assert max(len(seq) for seq in engine.tokenize(texts)) == engine.spec.max_seq_len, "no text reached the limit"
    assert not any(row.is_cut for row in rows)
    _assert_same(rows, expected)
    # The logits computed a few tokens at a time pool to the same vectors.
    engine.runner.head.chunk_tokens = 16
    _assert_same(_rows(engine, texts[-6:]), expected[-6:])


def test_top_k_of_the_checkpoint_and_of_the_server(tmp_path):
    path = save_sparse_encoder(tmp_path / "top-k", max_active_dims=8)
    texts = _texts()
    engine = _engine(path)
    assert engine.spec.sparse.num_slots == 8
    rows = _rows(engine, texts)
    assert any(row.is_cut for row in rows), "no text had more than 8 non-zeros: the top-k went untested"
    _assert_same(rows, reference_pairs(path, texts))  # encode reads max_active_dims from the same files
    _assert_same(_rows(_engine(path, max_active_dims=3), texts), reference_pairs(path, texts, max_active_dims=3))


def test_a_text_past_the_row_is_counted_and_keeps_its_first_ids(tmp_path):
    """Without a top-k, a random head's half-positive logits give far more non-zeros than a row
    holds: the row counts them all (so the front end can refuse the text) and keeps the first
    it can hold, in id order (the head compacts its rows without a sort)."""
    path = save_sparse_encoder(tmp_path / "dense", sparsity_shift=0.0)
    texts = load_texts(3)
    rows = _rows(_engine(path), texts)
    full = reference_pairs(path, texts)
    assert all(row.is_cut and len(row.indices) == MAX_UNCUT_DIMS for row in rows)
    assert [row.num_active for row in rows] == [len(indices) for indices, _ in full]
    _assert_same(rows, [(indices[:MAX_UNCUT_DIMS], values[:MAX_UNCUT_DIMS]) for indices, values in full])


def test_inference_free_documents_by_the_model_and_queries_by_lookup(tmp_path):
    path = save_inference_free(tmp_path / "inference-free")
    texts = _texts()
    engine = _engine(path)
    assert engine.spec.path.name == "document_0_MLMTransformer" and engine.spec.sparse.default_route == "document"
    _assert_same(_rows(engine, texts), reference_pairs(path, texts, task="document"))
    # A tenth of the static weights are 0: a query's tokens of those are left out, as encode_query leaves them.
    _assert_same(engine.static_queries.encode(texts), reference_pairs(path, texts, task="query"))
