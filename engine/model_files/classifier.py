"""A classifier's labels, head and the function that turns its logits into probabilities, read from
config.json (engine/model_files/checkpoint_kind.py says which checkpoints are classifiers).

A classifier reads a text, or a pair of texts as its tokenizer pairs them, as one sequence, and
gives one logit per label, from its own `*ForSequenceClassification` head
(engine/model_files/classifier_heads.py: BERT, RoBERTa / XLM-RoBERTa / CamemBERT, ModernBERT).

Labels are config.json's `id2label` in id order (transformers' LABEL_0, LABEL_1, ... where it has
none). The probabilities are what transformers' text-classification pipeline gives by default
(`TextClassificationPipeline.postprocess`, function_to_apply unset): none for problem_type
"regression", a sigmoid per label for "multi_label_classification" or a single label, else a
softmax over the labels. sentence-transformers modules are not read: transformers' own class,
which the reference runs, ignores them too.
"""

from __future__ import annotations

from dataclasses import dataclass

from rose_embed.engine.model_files.classifier_heads import (HeadError, architecture_of, num_labels_of,
                                                            read_classifier_head)

class ClassifierError(HeadError):
    """A checkpoint named a classifier that the engine cannot compute exactly."""


@dataclass(frozen=True)
class Classifier:
    """How a classifier's logits are computed from the transformer's last hidden state, and named.

    The engine hands out 2 * num_labels numbers per input: the probabilities (`function` applied),
    then the raw logits (vLLM's use_activation false, TEI's raw_scores).
    """

    head: str  # engine/model_files/classifier_heads.py's heads
    pooling: str  # "cls" or "mean"
    labels: tuple[str, ...]  # label i's name
    function: str  # "softmax", "sigmoid" or "none"
    classifier_activation: str | None = None  # ModernBERT's head

    @property
    def num_labels(self) -> int:
        return len(self.labels)


def _labels(hf_config: dict) -> tuple[str, ...]:
    num_labels = num_labels_of(hf_config)
    if num_labels < 1:
        raise ClassifierError("the classifier has no labels (config.json id2label and num_labels)")
    id2label = hf_config.get("id2label")
    if not isinstance(id2label, dict):
        return tuple(f"LABEL_{i}" for i in range(num_labels))
    by_id = {str(key): str(name) for key, name in id2label.items()}  # JSON's keys are strings
    if set(by_id) != {str(i) for i in range(num_labels)}:
        raise ClassifierError(f"config.json id2label must name the labels 0 to {num_labels - 1}; its keys are "
                              f"{', '.join(sorted(by_id))}")
    return tuple(by_id[str(i)] for i in range(num_labels))


def _function(hf_config: dict, num_labels: int) -> str:
    """TextClassificationPipeline's default function_to_apply, rule for rule."""
    problem_type = hf_config.get("problem_type")
    if problem_type == "regression":
        return "none"
    if problem_type == "multi_label_classification" or num_labels == 1:
        return "sigmoid"
    return "softmax"


def read_classifier(hf_config: dict) -> Classifier:
    """How to classify with a checkpoint named a classifier; ClassifierError names what cannot be
    served exactly."""
    architecture = architecture_of(hf_config)
    if not architecture.endswith("ForSequenceClassification"):
        raise ClassifierError(f"{architecture or hf_config.get('model_type')!r} is named a classifier, but only "
                              "*ForSequenceClassification checkpoints (BERT, RoBERTa, XLM-RoBERTa, CamemBERT, "
                              "ModernBERT) are supported")
    try:
        head = read_classifier_head(hf_config, "classifiers")
    except HeadError as exc:
        raise ClassifierError(f"{exc}; serve it with --model-kind embed for its backbone's embeddings") from exc
    labels = _labels(hf_config)
    return Classifier(head.head, head.pooling, labels, _function(hf_config, len(labels)), head.classifier_activation)
