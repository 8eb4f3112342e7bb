"""What a checkpoint serves, read from its files: texts' embeddings, pairs' relevance scores, or
texts' labels. `--model-kind` overrides it.

embed      any other checkpoint (a `*ForSequenceClassification` named so serves its backbone's
           embeddings, its classification head unused)
rerank     a `*ForSequenceClassification` of one label, or a sentence-transformers CrossEncoder save
           (config_sentence_transformers.json `model_type: CrossEncoder`) that is not a classifier
           of several labels: engine/model_files/reranker.py
classify   a `*ForSequenceClassification` of several labels, a CrossEncoder save of several labels
           too (its labels are what it gives), or one of one label named so by the override:
           engine/model_files/classifier.py
"""

from __future__ import annotations

from rose_embed.engine.model_files.classifier_heads import HeadError, architecture_of, num_labels_of

KINDS = ("embed", "rerank", "classify")


def checkpoint_kind(hf_config: dict, st_cfg: dict, override: str | None) -> str:
    """One of KINDS: the override where given, else what the files say. HeadError for an unknown override."""
    if override is not None:
        if override not in KINDS:
            raise HeadError(f"model kind must be one of {', '.join(KINDS)}; got {override!r}")
        return override
    is_sequence_classifier = architecture_of(hf_config).endswith("ForSequenceClassification")
    if is_sequence_classifier and num_labels_of(hf_config) > 1:
        return "classify"
    if is_sequence_classifier or st_cfg.get("model_type") == "CrossEncoder":
        return "rerank"
    return "embed"
