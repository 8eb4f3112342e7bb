"""Tiny random classifiers on disk, with the reference that classifies with them.

BERT, XLM-R and ModernBERT `*ForSequenceClassification` models of several named labels with random
weights, saved by transformers' own `save_pretrained` (the cross-encoders' tokenizers and configs:
tests/support/reranker_checkpoints.py). The reference is transformers' text-classification pipeline
on the same directory, every label's score (`top_k=None`): its default function for the probabilities
(softmax, or sigmoid for a multi-label config) and `function_to_apply="none"` for the raw logits.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from tests.support.qwen3_checkpoints import randomize
from tests.support.reranker_checkpoints import CROSS_ENCODERS, MAX_LENGTH

LABELS = ("negative", "neutral", "positive")

# A text, or a pair of texts as TEI's /predict takes them.
Input = str | tuple[str, str]


def save_classifier(path: Path, name: str, *, labels: tuple[str, ...] = LABELS, problem_type: str | None = None,
                    seed: int = 0) -> Path:
    """A random `name` classifier (a key of CROSS_ENCODERS) of `labels`, saved with save_pretrained; its
    tokenizer's limit is MAX_LENGTH tokens, so that long inputs are cut."""
    from transformers import AutoModelForSequenceClassification

    tokenizer, config_of = CROSS_ENCODERS[name]
    path.mkdir(parents=True, exist_ok=True)
    config = config_of(tokenizer(path))
    config.id2label = dict(enumerate(labels))
    config.label2id = {label: i for i, label in enumerate(labels)}
    config.problem_type = problem_type
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_config(config)
    randomize(model, seed)
    model.save_pretrained(path)
    tokenizer_config = path / "tokenizer_config.json"
    settings = json.loads(tokenizer_config.read_text())
    tokenizer_config.write_text(json.dumps({**settings, "model_max_length": MAX_LENGTH}))
    return path


def pipeline_scores(path: Path, inputs: list[Input], labels: tuple[str, ...] = LABELS) -> tuple[np.ndarray, np.ndarray]:
    """transformers' text-classification pipeline on each input, truncated at the tokenizer's limit:
    ([N, L] probabilities, [N, L] raw logits), columns in label order."""
    from transformers import pipeline

    classify = pipeline("text-classification", model=str(path), device="cpu", dtype=torch.float32)
    sent = [text if isinstance(text, str) else {"text": text[0], "text_pair": text[1]} for text in inputs]

    def table(function: str | None) -> np.ndarray:
        extra = {} if function is None else {"function_to_apply": function}
        answers = classify(sent, top_k=None, truncation=True, **extra)
        return np.array([[{a["label"]: a["score"] for a in answer}[label] for label in labels] for answer in answers])

    return table(None), table("none")
