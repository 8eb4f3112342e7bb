"""A ColBERT (PyLate) model's MaxSim scores computed by the engine, on the CPU in float32, against
colbert_scores over the reference transcription of PyLate's encode, within 1e-4.

Batches of several queries' groups (engine/text/colbert_groups.py), each document's row holding its
score in column 0 and zeros after it; a batch past the CPU's chunk of tokens (cut between groups);
queries without expansion, shorter than query_length; queries whose [MASK]s the model does not attend
to (hidden as keys); and the head's rows for a batch of texts are the token vectors the sentence head
gives, bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rose_embed.engine.contract.batch import pack
from rose_embed.engine.text.colbert_groups import encode_rerank
from tests.conftest import load_texts
from tests.support.colbert_checkpoints import maxsim, reference_vectors, save_colbert

pytestmark = pytest.mark.slow  # loads engines

TOLERANCE = 1e-4
QUERIES = ["How do I read a file line by line?", "", " ".join(load_texts(4)), "sort a list, in place!"]


def _documents() -> list[str]:
    return [*load_texts(40), "", "Hello, world!!! (yes).", "?!", " ".join(load_texts(6))]


def _engine(path):
    from rose_embed.engine.contract.config import EngineConfig
    from rose_embed.engine.rose.engine import Engine

    return Engine(EngineConfig(model=str(path), device="cpu", dtype="float32"))


def _scores(engine, queries: list[str], documents: list[str], max_tokens: int) -> list[np.ndarray]:
    """Each query's scores of every document, all in one batch of groups."""
    seqs, segments = [], []
    for query in queries:
        s, g = encode_rerank(engine.colbert, query, documents, None, max_tokens, 10_000)
        seqs += s
        segments += g
    batch = pack(seqs, segments)
    rows = engine.execute_packed(batch).wait()
    assert rows.shape == (len(queries) * len(documents), engine.spec.embedding_dim)
    assert not rows[:, 1:].any()  # a score row is [score, 0, ...]: no token vector comes back
    return np.split(rows[:, 0], len(queries)), batch


@pytest.mark.parametrize("expansion,attend", [(True, True), (True, False), (False, False)],
                         ids=["expansion", "hidden-expansion", "no-expansion"])
def test_scores_equal_colbert_scores(tmp_path, expansion, attend):
    # attend false (PyLate's default): the query's [MASK]s are hidden as keys, in each of its groups.
    path = save_colbert(tmp_path / "colbert", do_query_expansion=expansion, attend_to_expansion_tokens=attend)
    engine = _engine(path)
    documents = _documents()
    # Groups of 300 tokens or fewer: four queries' groups, thirty or more, in one batch of more than the
    # 2,048 tokens the CPU computes at once.
    got, batch = _scores(engine, QUERIES, documents, 300)
    assert batch.num_tokens > 2048 and len(batch.group_starts()) > 8
    want_documents = reference_vectors(path, documents, False)
    for query, ours in zip(QUERIES, got):
        query_vectors = reference_vectors(path, [query], True)[0]
        assert len(query_vectors) == 12 or not expansion  # every query expanded, or its own tokens
        np.testing.assert_allclose(ours, maxsim(query_vectors, want_documents), atol=TOLERANCE, rtol=0,
                                   err_msg=query)


def test_a_batch_of_texts_gets_the_sentence_heads_vectors(tmp_path):
    path = save_colbert(tmp_path / "colbert")
    engine = _engine(path)
    head = engine.runner.head
    seqs, segments = engine.colbert.encode(_documents()[:10], is_query=False)
    batch = pack(seqs, segments)
    with torch.inference_mode():
        hidden = torch.randn(batch.num_tokens, engine.spec.hidden_size)
        segment_ids = torch.from_numpy(batch.pooling_ids())
        ours = head(hidden, segment_ids, batch.num_outputs)
        theirs = head.sentence(hidden, segment_ids, batch.num_outputs)
    assert torch.equal(ours, theirs)
