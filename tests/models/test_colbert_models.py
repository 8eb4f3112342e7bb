"""ColBERT (PyLate) models on the CPU in float32 against PyLate's encode and colbert_scores, within 1e-4.

A tiny random BERT ColBERT saved as PyLate saves one (tests/support/colbert_checkpoints.py): each
text's token vectors from the engine's rows (one pooling segment per kept token) equal the
transcribed `ColBERT.encode` in query mode (prefix, [MASK] expansion to query_length, every token
kept) and document mode (prefix, cut at document_length, skiplist tokens dropped), in one packed
batch of texts of many lengths; MaxSim over them equals `colbert_scores`. Without query expansion
queries keep their own tokens only.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from rose_embed.engine.contract.batch import pack
from tests.conftest import load_texts
from tests.support.colbert_checkpoints import PROJECTION_DIM, maxsim, reference_vectors, save_colbert

pytestmark = pytest.mark.slow  # loads engines

TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """One checkpoint of the default layout, copied by the tests that change its files."""
    return save_colbert(tmp_path_factory.mktemp("colbert") / "colbert")


def _copy(saved, tmp_path):
    import shutil

    return Path(shutil.copytree(saved, tmp_path / "colbert"))


def _texts() -> list[str]:
    return [*load_texts(8), "", "Hello, world!!! (yes).", "  spaced   text  ", "?!", " ".join(load_texts(3))]


def _engine(path):
    from rose_embed.engine.contract.config import EngineConfig
    from rose_embed.engine.rose.engine import Engine

    return Engine(EngineConfig(model=str(path), device="cpu", dtype="float32"))


def _vectors(engine, texts: list[str], is_query: bool) -> list[np.ndarray]:
    seqs, segments = engine.colbert.encode(texts, is_query)
    rows = engine.execute_packed(pack(seqs, segments)).wait()
    counts = [int(ids.max()) + 1 for ids in segments]
    assert rows.shape == (sum(counts), PROJECTION_DIM)
    return np.split(rows, np.cumsum(counts)[:-1])


def _assert_same(got: list[np.ndarray], expected: list[np.ndarray]) -> None:
    for i, (ours, theirs) in enumerate(zip(got, expected, strict=True)):
        assert ours.shape == theirs.shape, f"text {i}: {ours.shape[0]} token vectors, PyLate keeps {theirs.shape[0]}"
        np.testing.assert_allclose(ours, theirs, atol=TOLERANCE, rtol=0, err_msg=f"text {i}")


def test_vectors_and_scores_equal_pylate(saved):
    path = saved  # query_length 12, document_length 40
    engine = _engine(path)
    texts = _texts()
    queries, documents = _vectors(engine, texts, True), _vectors(engine, texts, False)
    _assert_same(queries, reference_vectors(path, texts, True))
    _assert_same(documents, reference_vectors(path, texts, False))
    assert all(len(q) == 12 for q in queries)  # every query expanded to query_length
    assert len(documents[texts.index("Hello, world!!! (yes).")]) == 6  # [CLS] [D] hello world yes [SEP]
    assert max(len(d) for d in documents) < 40  # the longest cut at document_length, its punctuation dropped
    for query in queries[:3]:
        np.testing.assert_allclose(maxsim(query, documents), maxsim(query, reference_vectors(path, texts, False)),
                                   atol=TOLERANCE * 12, rtol=0)


def test_queries_without_expansion_keep_their_own_tokens(tmp_path):
    path = save_colbert(tmp_path / "colbert", do_query_expansion=False, attend_to_expansion_tokens=False)
    engine = _engine(path)
    texts = _texts()
    queries = _vectors(engine, texts, True)
    _assert_same(queries, reference_vectors(path, texts, True))
    assert len(queries[texts.index("")]) == 3  # [CLS] [Q] [SEP]


def _rewrite_config(path, **keys) -> None:
    import json

    cfg_path = path / "config_sentence_transformers.json"
    cfg_path.write_text(json.dumps({**json.loads(cfg_path.read_text()), **keys}))


@pytest.mark.parametrize("keys,named", [
    ({"attend_to_expansion_tokens": False}, "attend_to_expansion_tokens false is not supported"),
    ({"query_prefix": "[QUERY] "}, "query_prefix '[QUERY] ' is not a token"),
    ({"document_length": 600}, "past the model's 512 positions"),
    ({"query_length": "32"}, "query_length must be an integer"),
])
def test_what_cannot_be_computed_exactly_is_refused_by_name(saved, tmp_path, keys, named):
    from rose_embed.engine.model_files.loader import ModelLoadError, load_spec

    path = _copy(saved, tmp_path)
    assert load_spec(str(path)).colbert is not None
    _rewrite_config(path, **keys)
    with pytest.raises(ModelLoadError, match=re.escape(named)):
        load_spec(str(path))


def test_modules_past_dense_are_refused_by_name(saved, tmp_path):
    import json

    from rose_embed.engine.model_files.loader import ModelLoadError, load_spec

    path = _copy(saved, tmp_path)
    modules = json.loads((path / "modules.json").read_text())
    modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
    (path / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(ModelLoadError, match=r"modules \['Transformer', 'Dense', 'Normalize'\] is not supported"):
        load_spec(str(path))


@pytest.mark.parametrize("quantization", ["int8", "fp8"])
def test_quantization_is_refused_by_name(saved, quantization):
    from rose_embed.engine.contract.config import EngineConfig
    from rose_embed.engine.rose.engine import Engine

    with pytest.raises(ValueError, match=f"--quantization {quantization} serves embedders; .* multi-vector"):
        Engine(EngineConfig(model=str(saved), device="cpu", dtype="float32", quantization=quantization))


def test_the_library_embedder_refuses_a_colbert_model(saved):
    from rose_embed.engine.rose.pipeline import refuse_non_embedder

    engine = _engine(saved)
    with pytest.raises(ValueError, match="multi-vector"):
        refuse_non_embedder(engine)
