"""Classifier probabilities on CPU in fp32 against transformers' text-classification pipeline, within 1e-5.

Tiny random classifiers (BERT, XLM-R, ModernBERT; saved by save_pretrained,
tests/support/classifier_checkpoints.py) on texts and pairs of texts, some long enough to be cut
at the limit: the probabilities (softmax over three labels; a sigmoid per label for a multi-label
config and for a one-label classifier named so by the kind flag) and the raw logits.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import load_texts
from tests.support.classifier_checkpoints import LABELS, pipeline_scores, save_classifier

pytestmark = pytest.mark.slow  # loads engines

TOLERANCE = 1e-5  # measured: 5e-7 on the probabilities, 1.2e-6 on the logits


def _inputs() -> list[str | tuple[str, str]]:
    texts = load_texts(40)
    long_text = " ".join(texts[20:])  # past the limit of 128 tokens
    return [*texts[:8], "", "  spaced   text  ", long_text, *((texts[0], t) for t in texts[8:12]),
            (texts[1], long_text), (long_text, long_text)]


def _engine_rows(path, kind: str | None = None) -> tuple[np.ndarray, int]:
    """[N, 2L] rows for _inputs(), and how many were cut at the limit."""
    from rose_embed.engine.contract.config import EngineConfig, ModelOverrides
    from rose_embed.engine.rose.engine import Engine

    engine = Engine(EngineConfig(dtype="float32", model=str(path), device="cpu",
                                 model_overrides=ModelOverrides(kind=kind)))
    inputs = _inputs()
    texts, pairs = [one for one in inputs if isinstance(one, str)], [one for one in inputs if not isinstance(one, str)]
    seqs = engine.tokenize(texts)
    encoded = engine.pairs.encode_each(pairs)
    num_cut = sum(len(s) == engine.spec.max_seq_len for s in seqs) + len(encoded.truncated)
    return np.asarray(engine.execute(seqs + encoded.seqs).wait()), num_cut


@pytest.mark.parametrize("name,problem_type", [("bert", None), ("xlm-roberta", None), ("modernbert", None),
                                               ("bert", "multi_label_classification")],
                         ids=["bert", "xlm-roberta", "modernbert", "bert-multi-label"])
def test_probabilities_equal_the_transformers_pipeline(tmp_path, name, problem_type):
    path = save_classifier(tmp_path / name, name, problem_type=problem_type)
    rows, num_cut = _engine_rows(path)
    probs, logits = pipeline_scores(path, _inputs())
    assert num_cut >= 2, "no text and no pair reached the limit: truncation went untested"
    assert np.ptp(probs) > 0.05, "the probabilities hardly differ: a mixed-up input could go unnoticed"
    is_sigmoid = problem_type is not None
    assert np.allclose(probs.sum(axis=1), 1, atol=1e-5) != is_sigmoid, "softmax and sigmoid were not told apart"
    num_labels = len(LABELS)
    np.testing.assert_allclose(rows[:, :num_labels], probs, atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(rows[:, num_labels:], logits, atol=TOLERANCE, rtol=0)


def test_one_label_classifies_with_a_sigmoid_when_the_flag_says_so(tmp_path):
    path = save_classifier(tmp_path / "one", "bert", labels=("relevant",))
    rows, _ = _engine_rows(path, kind="classify")
    probs, logits = pipeline_scores(path, _inputs(), labels=("relevant",))
    np.testing.assert_allclose(rows, np.concatenate([probs, logits], axis=1), atol=TOLERANCE, rtol=0)
