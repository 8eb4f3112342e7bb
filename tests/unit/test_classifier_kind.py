"""Which checkpoints are classifiers, their labels and the function on their logits, and which are
refused by name (engine/model_files/classifier.py, checkpoint_kind.py), read from config files alone."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rose_embed.engine.contract.config import ModelOverrides
from rose_embed.engine.model_files.loader import ModelLoadError, load_spec
from tests.support.helpers import config_only_model

BERT = {"model_type": "bert", "hidden_size": 32, "max_position_embeddings": 512, "vocab_size": 100,
        "type_vocab_size": 2, "architectures": ["BertForSequenceClassification"], "id2label": {"0": "LABEL_0"}}
THREE = {**BERT, "id2label": {"0": "negative", "1": "neutral", "2": "positive"}}


def _model(path, config: dict) -> str:
    return str(config_only_model(path / "model", config))


def test_several_labels_classify_with_softmax_over_id2label(tmp_path):
    spec = load_spec(_model(tmp_path, {**THREE, "id2label": {"2": "positive", "0": "negative", "1": "neutral"}}))
    classifier = spec.classifier
    assert (spec.kind, classifier.labels, classifier.function) == ("classify", ("negative", "neutral", "positive"),
                                                                    "softmax")
    assert (classifier.head, spec.pooling, spec.embedding_dim, spec.normalize) == ("bert_pooler", "cls", 6, False)
    assert spec.reranker is None and not spec.is_reranker


@pytest.mark.parametrize("problem_type,num_labels,function", [
    ("multi_label_classification", 3, "sigmoid"), ("single_label_classification", 3, "softmax"),
    ("regression", 3, "none"), (None, 1, "sigmoid"), ("single_label_classification", 1, "sigmoid"),
    ("regression", 1, "none"),
])
def test_the_function_is_the_text_classification_pipelines(tmp_path, problem_type, num_labels, function):
    """TextClassificationPipeline.postprocess's default: regression none; multi-label or one label
    sigmoid (before single_label_classification is looked at); else softmax."""
    config = {**BERT, "id2label": {str(i): f"LABEL_{i}" for i in range(num_labels)}, "problem_type": problem_type}
    spec = load_spec(_model(tmp_path, config), overrides=ModelOverrides(kind="classify"))
    assert spec.classifier.function == function


def test_one_label_is_a_reranker_unless_the_flag_says_classify(tmp_path):
    path = _model(tmp_path, BERT)
    assert load_spec(path).kind == "rerank"
    spec = load_spec(path, overrides=ModelOverrides(kind="classify"))
    assert (spec.kind, spec.classifier.labels, spec.embedding_dim) == ("classify", ("LABEL_0",), 2)


def test_the_flag_turns_a_classifier_into_its_backbone_embedder(tmp_path):
    spec = load_spec(_model(tmp_path, THREE), overrides=ModelOverrides(kind="embed"))
    assert (spec.kind, spec.classifier, spec.embedding_dim) == ("embed", None, 32)


def test_labels_without_id2label_are_transformers_defaults(tmp_path):
    config = {key: value for key, value in THREE.items() if key != "id2label"}
    assert load_spec(_model(tmp_path, {**config, "num_labels": 3})).classifier.labels == ("LABEL_0", "LABEL_1",
                                                                                          "LABEL_2")


@pytest.mark.parametrize("model_type,architecture,head,pooling", [
    ("xlm-roberta", "XLMRobertaForSequenceClassification", "roberta_head", "cls"),
    ("modernbert", "ModernBertForSequenceClassification", "modernbert_head", "mean"),
])
def test_the_rerankers_other_heads_classify_too(tmp_path, model_type, architecture, head, pooling):
    config = {**THREE, "model_type": model_type, "architectures": [architecture], "classifier_pooling": "mean"}
    classifier = load_spec(_model(tmp_path, config)).classifier
    assert (classifier.head, classifier.pooling) == (head, pooling)


MODERNBERT = {**THREE, "model_type": "modernbert", "architectures": ["ModernBertForSequenceClassification"]}
REFUSED = [
    ("distilbert", {**THREE, "model_type": "distilbert", "architectures": ["DistilBertForSequenceClassification"],
                    "dim": 32},
     "DistilBertForSequenceClassification classifiers are not supported.*--model-kind embed"),
    ("ids with a gap", {**THREE, "id2label": {"0": "a", "1": "b", "3": "c"}}, "id2label must name the labels 0 to 2"),
    ("a plain encoder named a classifier", {**THREE, "architectures": ["BertModel"]},
     "'BertModel' is named a classifier"),
    ("modernbert pooling", {**MODERNBERT, "classifier_pooling": "max"}, "classifier_pooling 'max'"),
]


@pytest.mark.parametrize("name,config,message", REFUSED, ids=[r[0] for r in REFUSED])
def test_classifiers_that_cannot_be_served_exactly_are_refused_by_name(tmp_path, name, config, message):
    with pytest.raises(ModelLoadError, match=message):
        load_spec(_model(tmp_path, config), overrides=ModelOverrides(kind="classify"))


def test_the_library_embeds_no_texts_with_a_classifier(tmp_path):
    """Engine.embed and the corpus CLI refuse it by name: its rows are label probabilities."""
    from rose_embed.engine.rose.pipeline import refuse_non_embedder

    with pytest.raises(ValueError, match="is a classifier.*POST /classify"):
        refuse_non_embedder(SimpleNamespace(spec=load_spec(_model(tmp_path, THREE))))
