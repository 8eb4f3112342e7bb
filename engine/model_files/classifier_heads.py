"""The heads of `*ForSequenceClassification` checkpoints that the engine computes exactly, read from
config.json. Rerankers (one label, engine/model_files/reranker.py) and classifiers (several labels,
engine/model_files/classifier.py) run the same heads; engine/rose/layers/classifier_layers.py
computes them:

  bert_pooler      BERT: tanh(pooler.dense([CLS])) -> classifier
  roberta_head     RoBERTa, XLM-RoBERTa, CamemBERT: tanh(classifier.dense(<s>)) -> classifier.out_proj
  modernbert_head  ModernBERT: norm(act(head.dense(pooled))) -> classifier, pooled on CLS or by the
                   mean as `classifier_pooling` says
"""

from __future__ import annotations

from dataclasses import dataclass

# config.json model_type -> the head its *ForSequenceClassification class runs.
CLASSIFIER_HEADS = {"bert": "bert_pooler", "roberta": "roberta_head", "xlm-roberta": "roberta_head",
                    "camembert": "roberta_head", "modernbert": "modernbert_head"}
# ModernBERT's classifier_activation (a transformers ACT2FN name) -> the torch function it is.
MODERNBERT_ACTIVATIONS = {"gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh", "gelu_new": "gelu_tanh",
                          "relu": "relu", "silu": "silu", "tanh": "tanh"}


class HeadError(ValueError):
    """A checkpoint named a reranker or a classifier whose head the engine cannot compute exactly."""


@dataclass(frozen=True)
class ClassifierHead:
    """Which head, on which pooled state: "cls" or "mean" (ModernBERT's `classifier_pooling`)."""

    head: str  # a value of CLASSIFIER_HEADS
    pooling: str
    classifier_activation: str | None = None  # ModernBERT's head: a value of MODERNBERT_ACTIVATIONS


def architecture_of(hf_config: dict) -> str:
    """config.json's first `architectures` entry ("" without one)."""
    names = hf_config.get("architectures") or [""]
    return str(names[0])


def num_labels_of(hf_config: dict) -> int:
    """The labels transformers gives the checkpoint: id2label's, else num_labels (2 by default)."""
    if isinstance(hf_config.get("id2label"), dict):
        return len(hf_config["id2label"])
    return int(hf_config.get("num_labels", 2))


def read_classifier_head(hf_config: dict, plural: str) -> ClassifierHead:
    """The head of a `*ForSequenceClassification` checkpoint; HeadError names what cannot be computed
    exactly. `plural`: what the refusals call such checkpoints ("cross-encoders", "classifiers")."""
    architecture, model_type = architecture_of(hf_config), hf_config.get("model_type", "")
    if model_type not in CLASSIFIER_HEADS:
        raise HeadError(f"{architecture or model_type} {plural} are not supported (supported: "
                        f"{', '.join(sorted(CLASSIFIER_HEADS))})")
    head = CLASSIFIER_HEADS[model_type]
    if head != "modernbert_head":
        return ClassifierHead(head, "cls")
    pooling = hf_config.get("classifier_pooling", "cls")
    act = hf_config.get("classifier_activation", "gelu")
    if pooling not in ("cls", "mean") or act not in MODERNBERT_ACTIVATIONS:
        raise HeadError(f"ModernBERT with classifier_pooling {pooling!r} and classifier_activation {act!r} is not "
                        f"supported (cls or mean; {', '.join(MODERNBERT_ACTIVATIONS)})")
    return ClassifierHead(head, pooling, MODERNBERT_ACTIVATIONS[act])
