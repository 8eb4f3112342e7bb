"""ColBERT (PyLate) models on the CPU in float32 against PyLate's encode and colbert_scores, within 1e-4.

A tiny random BERT ColBERT saved as PyLate saves one (tests/support/colbert_checkpoints.py): each
text's token vectors from the engine's rows (one pooling segment per kept token) equal the
transcribed `ColBERT.encode` in query mode (prefix, [MASK] expansion to query_length, every token
kept) and document mode (prefix, cut at document_length, skiplist tokens dropped), in one packed
batch of texts of many lengths; MaxSim over them equals `colbert_scores`. Without query expansion
queries keep their own tokens only. With expansion and attend_to_expansion_tokens false (PyLate's
default) the [MASK]s are hidden as keys: queries of every length, in one batch with documents, on
the native kernel and on grouped SDPA.
"""

from __future__ import annotations

import re
from dataclasses import replace
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


def _engine(path, attention_backend: str = "auto"):
    from rose_embed.engine.contract.config import EngineConfig
    from rose_embed.engine.rose.engine import Engine

    return Engine(EngineConfig(model=str(path), device="cpu", dtype="float32", attention_backend=attention_backend))


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


@pytest.mark.parametrize("attention_backend", ["auto", "sdpa"])  # the native kernel where it runs; grouped SDPA
def test_hidden_expansion_tokens_in_a_batch_mixed_with_documents(tmp_path, attention_backend):
    path = save_colbert(tmp_path / "colbert", attend_to_expansion_tokens=False)  # PyLate's default
    engine = _engine(path, attention_backend)
    texts = [*_texts(), "read a file", "sort a list in place", "what does the queue share?"]
    queries, documents = engine.colbert.encode(texts, True), engine.colbert.encode(texts, False)
    lengths = [int((ids >= 0).sum()) for ids in queries[0]]
    assert min(lengths) == 3 and max(lengths) == 12 and len(set(lengths)) > 3  # some hide 9 [MASK]s, some none
    # Queries and documents in turn, as the queue mixes two requests' pieces.
    order = [(side, i) for i in range(len(texts)) for side in (queries, documents)]
    seqs = [side[0][i] for side, i in order]
    segments = [side[1][i] for side, i in order]
    rows = engine.execute_packed(pack(seqs, segments)).wait()
    counts = [int(ids.max()) + 1 for ids in segments]
    vectors = np.split(rows, np.cumsum(counts)[:-1])
    want_queries, want_documents = reference_vectors(path, texts, True), reference_vectors(path, texts, False)
    _assert_same(vectors[0::2], want_queries)
    _assert_same(vectors[1::2], want_documents)
    assert all(len(q) == 12 for q in vectors[0::2])  # every [MASK] still gives its vector
    # Hiding them changes the vectors: the same checkpoint attending to its [MASK]s gives others.
    _rewrite_config(path, attend_to_expansion_tokens=True)
    short = texts.index("read a file")  # 6 tokens of its own, 6 [MASK]s
    attending = _vectors(_engine(path, attention_backend), [texts[short]], True)[0]
    assert np.abs(attending - want_queries[short]).max() > 100 * TOLERANCE
    for query in vectors[0:6:2]:
        np.testing.assert_allclose(maxsim(query, vectors[1::2]), maxsim(query, want_documents), atol=TOLERANCE * 12,
                                   rtol=0)


def test_where_the_attention_cannot_hide_keys_a_batch_that_hides_some_runs_on_per_sequence_sdpa(saved):
    from types import SimpleNamespace

    from rose_embed.engine.model_files.loader import load_spec
    from rose_embed.engine.rose.attention.ragged import AttentionShape, SDPAPerSequenceBackend
    from rose_embed.engine.rose.engine import hidden_keys_backend

    spec = load_spec(str(saved))
    hidden = SimpleNamespace(name=spec.name, colbert=replace(spec.colbert, hides_expansion=True))
    shape = AttentionShape(4, 4, 8, is_causal=False)
    assert isinstance(hidden_keys_backend(hidden, shape, SimpleNamespace(name="varlen")), SDPAPerSequenceBackend)
    assert hidden_keys_backend(hidden, shape, SimpleNamespace(name="sdpa", takes_num_keys=True)) is None
    windowed = replace(shape, window=(8, 8))  # query_length 12: the last [MASK]s would see no key
    with pytest.raises(ValueError, match=r"sliding window \(8 tokens back\) is shorter than its query_length 12"):
        hidden_keys_backend(hidden, windowed, SimpleNamespace(name="sdpa", takes_num_keys=True))


class _KeysUnhidden:
    """A backend that cannot hide keys (as the GPU's kernels cannot), delegating to a CPU one; counts its
    batches."""

    def __init__(self, inner):
        self.inner, self.name, self.batches = inner, "unhiding", 0

    def prepare(self, cu_seqlens, cu_seqlens_host, max_seqlen):
        self.batches += 1
        return self.inner.prepare(cu_seqlens, cu_seqlens_host, max_seqlen)

    def forward(self, *args, **kwargs):
        return self.inner.forward(*args, **kwargs)


def test_queries_hiding_keys_equal_pylate_on_a_backend_that_cannot_hide_them(tmp_path):
    """The engine's path on a GPU, taken on the CPU: its own backend (the GPU's kernels, their graphs) runs
    the documents; a batch whose queries hide [MASK]s runs on the per-sequence SDPA beside it."""
    from rose_embed.engine.rose.engine import hidden_keys_backend

    path = save_colbert(tmp_path / "colbert", attend_to_expansion_tokens=False)  # PyLate's default
    engine = _engine(path)
    runner = engine.runner
    unhiding = _KeysUnhidden(runner.attention)
    shape = engine.runner.model.attention_shape(False).bounded_by(engine.spec.max_seq_len)
    runner.attention = unhiding
    runner.hidden_keys_attention = hidden_keys_backend(engine.spec, shape, unhiding)
    texts = [*_texts(), "read a file", "sort a list in place"]
    documents = _vectors(engine, texts, False)
    assert unhiding.batches > 0
    seen = unhiding.batches
    queries = _vectors(engine, texts, True)
    assert unhiding.batches == seen  # every query batch hid keys: none ran on the unhiding backend
    _assert_same(queries, reference_vectors(path, texts, True))
    _assert_same(documents, reference_vectors(path, texts, False))


def _rewrite_config(path, **keys) -> None:
    import json

    cfg_path = path / "config_sentence_transformers.json"
    cfg_path.write_text(json.dumps({**json.loads(cfg_path.read_text()), **keys}))


@pytest.mark.parametrize("keys,named", [
    ({"attend_to_expansion_tokens": "false"}, "attend_to_expansion_tokens must be true or false"),
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
