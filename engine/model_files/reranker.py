"""Whether a checkpoint is a reranker, and how its score is computed, read from its files.

A reranker reads a (query, document) pair as one sequence and gives one relevance score. The
kinds the engine computes exactly:

cross-encoder   a `*ForSequenceClassification` checkpoint with one label (config.json
                `architectures`), or a sentence-transformers CrossEncoder save
                (config_sentence_transformers.json `model_type: CrossEncoder`, one Transformer
                module): BERT (pooler then classifier on [CLS]), RoBERTa / XLM-RoBERTa (their
                classification head on <s>), ModernBERT (its prediction head on the CLS or
                mean pooled state). The pair is tokenized as the tokenizer pairs two texts,
                truncated longest-first to the model's limit, as CrossEncoder.predict does.
                The score is the activation sentence-transformers applies by default: the
                save's `activation_fn` (or the older `sbert_ce_default_activation_function`),
                else Sigmoid for one label.
qwen3 yes/no    Qwen3-Reranker: a Qwen3ForCausalLM named a reranker by the kind override or by
                a CrossEncoder config_sentence_transformers.json. Its model card's prompt
                template around "<Instruct>: ...\\n<Query>: ...\\n<Document>: ...", then
                p(yes) / (p(yes) + p(no)) at the last position, which is the sigmoid of
                logit(yes) - logit(no): only those two rows of the LM head are computed.

Anything else named a reranker (several labels, another architecture, an activation that is
not an element-wise torch module, modules after the Transformer other than Qwen's yes/no
LogitScore) is refused by name. Which checkpoints are rerankers: engine/model_files/checkpoint_kind.py;
the classifier heads they share with classifiers: engine/model_files/classifier_heads.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rose_embed.engine.model_files.classifier_heads import (HeadError, architecture_of, num_labels_of,
                                                            read_classifier_head)
from rose_embed.engine.model_files.json_files import read_json, read_json_object
from rose_embed.engine.model_files.st_modules import ACTIVATIONS

# Qwen3-Reranker's model card: the system turn, the user turn's layout and the empty thinking block
# that ends the prompt, so that the next token is the answer, "yes" or "no".
QWEN3_PREFIX = ('<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the '
                'Instruct provided. Note that the answer can only be "yes" or "no".<|im_end|>\n<|im_start|>user\n')
QWEN3_SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
QWEN3_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
QWEN3_BODY = "<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}"
# The model card's max_length: the whole prompt, template included, is cut to this many tokens.
QWEN3_MAX_LEN = 8192


class RerankerError(HeadError):
    """A checkpoint named a reranker that the engine cannot score exactly."""


@dataclass(frozen=True)
class Reranker:
    """How a reranker's score is computed from the transformer's last hidden state.

    head: "bert_pooler" | "roberta_head" | "modernbert_head" (a classifier on the pooled state)
    or "yes_no" (two LM-head rows at the last token). The engine hands out two numbers per pair:
    the score (activation applied) and the raw logit (TEI's raw_scores).
    """

    head: str
    pooling: str  # "cls", "mean" or "last"
    activation: str  # a torch.nn class name from st_modules.ACTIVATIONS
    classifier_activation: str | None = None  # ModernBERT's head: classifier_heads.MODERNBERT_ACTIVATIONS' values
    yes_id: int | None = None  # Qwen3: the tokens whose logits are compared
    no_id: int | None = None

    @property
    def is_template(self) -> bool:
        """The pair is formatted into Qwen3-Reranker's prompt rather than tokenized as a pair."""
        return self.head == "yes_no"


def _activation(hf_config: dict, st_cfg: dict) -> str:
    path = st_cfg.get("activation_fn") or hf_config.get("sbert_ce_default_activation_function")
    if path is None:
        return "Sigmoid"  # CrossEncoder's default for one label
    name = str(path).rsplit(".", 1)[-1]
    if not str(path).startswith("torch.") or name not in ACTIVATIONS:
        raise RerankerError(f"the cross-encoder's activation_fn {path!r} is not supported ({', '.join(ACTIVATIONS)} "
                            "from torch.nn are)")
    return name


def _modules(model_dir: Path) -> list[str]:
    """The class names of modules.json's entries (empty without one)."""
    entries = read_json(model_dir / "modules.json") or []
    return [str(entry.get("type", "")).rsplit(".", 1)[-1] for entry in entries if isinstance(entry, dict)]


def _qwen3(model_dir: Path, hf_config: dict, st_cfg: dict, vocab: dict[str, int]) -> Reranker:
    modules = _modules(model_dir)
    if modules and modules[1:] not in ([], ["LogitScore"]):
        raise RerankerError(f"a Qwen3 reranker with modules {modules} is not supported (Transformer and LogitScore are)")
    if "LogitScore" in modules:
        index = modules.index("LogitScore")
        entry = (read_json(model_dir / "modules.json") or [])[index]
        cfg = read_json_object(model_dir / str(entry.get("path", "")) / "config.json") or {}
        if (cfg.get("true_token_id"), cfg.get("false_token_id")) != (vocab.get("yes"), vocab.get("no")):
            raise RerankerError("the LogitScore module compares other tokens than 'yes' and 'no'; only Qwen3-Reranker's "
                                "yes/no score is supported")
    if vocab.get("yes") is None or vocab.get("no") is None:
        raise RerankerError("a Qwen3 reranker's tokenizer must have the tokens 'yes' and 'no'")
    # sigmoid(logit(yes) - logit(no)) is the model card's p(yes) / (p(yes) + p(no)).
    return Reranker("yes_no", "last", _activation(hf_config, st_cfg), yes_id=vocab["yes"], no_id=vocab["no"])


def read_reranker(model_dir: Path, hf_config: dict, st_cfg: dict, vocab: Callable[[], dict[str, int]]) -> Reranker:
    """How to score a checkpoint named a reranker (engine/model_files/checkpoint_kind.py); RerankerError
    names what cannot be served exactly.
    `vocab`: the tokenizer's token -> id, read only where needed (Qwen3's "yes" and "no")."""
    model_type = hf_config.get("model_type", "")
    architecture = architecture_of(hf_config)
    if model_type == "qwen3" and architecture.endswith("ForCausalLM"):
        return _qwen3(model_dir, hf_config, st_cfg, vocab())
    if not architecture.endswith("ForSequenceClassification"):
        raise RerankerError(f"{architecture or model_type!r} is named a reranker, but only *ForSequenceClassification "
                            "cross-encoders (BERT, RoBERTa, XLM-RoBERTa, ModernBERT) and Qwen3-Reranker "
                            "(Qwen3ForCausalLM) are supported")
    head = read_classifier_head(hf_config, "cross-encoders")
    if num_labels_of(hf_config) != 1:
        raise RerankerError(f"this cross-encoder has {num_labels_of(hf_config)} labels; a reranker gives one score, "
                            "so only one-label cross-encoders are supported (serve it with --model-kind classify "
                            "for its labels)")
    modules = _modules(model_dir)
    if modules[1:]:
        raise RerankerError(f"a cross-encoder with modules after its Transformer ({', '.join(modules[1:])}) is not "
                            "supported")
    return Reranker(head.head, head.pooling, _activation(hf_config, st_cfg),
                    classifier_activation=head.classifier_activation)
