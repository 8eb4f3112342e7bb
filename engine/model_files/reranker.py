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
LogitScore) is refused by name. A `*ForSequenceClassification` checkpoint with several labels
and no CrossEncoder marking stays an embedder of its backbone, as before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rose_embed.engine.model_files.json_files import read_json, read_json_object
from rose_embed.engine.model_files.st_modules import ACTIVATIONS

KINDS = ("embed", "rerank")
# config.json model_type -> the cross-encoder head its *ForSequenceClassification class runs.
_CLASSIFIER_HEADS = {"bert": "bert_pooler", "roberta": "roberta_head", "xlm-roberta": "roberta_head",
                     "camembert": "roberta_head", "modernbert": "modernbert_head"}
# ModernBERT's classifier_activation (a transformers ACT2FN name) -> the torch function it is.
MODERNBERT_ACTIVATIONS = {"gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh", "gelu_new": "gelu_tanh",
                          "relu": "relu", "silu": "silu", "tanh": "tanh"}

# Qwen3-Reranker's model card: the system turn, the user turn's layout and the empty thinking block
# that ends the prompt, so that the next token is the answer, "yes" or "no".
QWEN3_PREFIX = ('<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the '
                'Instruct provided. Note that the answer can only be "yes" or "no".<|im_end|>\n<|im_start|>user\n')
QWEN3_SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
QWEN3_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
QWEN3_BODY = "<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}"
# The model card's max_length: the whole prompt, template included, is cut to this many tokens.
QWEN3_MAX_LEN = 8192


class RerankerError(ValueError):
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
    classifier_activation: str | None = None  # ModernBERT's head: MODERNBERT_ACTIVATIONS' values
    yes_id: int | None = None  # Qwen3: the tokens whose logits are compared
    no_id: int | None = None

    @property
    def is_template(self) -> bool:
        """The pair is formatted into Qwen3-Reranker's prompt rather than tokenized as a pair."""
        return self.head == "yes_no"


def _architecture(hf_config: dict) -> str:
    names = hf_config.get("architectures") or [""]
    return str(names[0])


def _num_labels(hf_config: dict) -> int:
    if isinstance(hf_config.get("id2label"), dict):
        return len(hf_config["id2label"])
    return int(hf_config.get("num_labels", 2))


def is_reranker(hf_config: dict, st_cfg: dict, kind: str | None) -> bool:
    """The kind override ("embed" | "rerank"); else a CrossEncoder save or a one-label classifier."""
    if kind is not None:
        if kind not in KINDS:
            raise RerankerError(f"model kind must be one of {', '.join(KINDS)}; got {kind!r}")
        return kind == "rerank"
    if st_cfg.get("model_type") == "CrossEncoder":
        return True
    return _architecture(hf_config).endswith("ForSequenceClassification") and _num_labels(hf_config) == 1


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
    """How to score a checkpoint that is_reranker; RerankerError names what cannot be served exactly.
    `vocab`: the tokenizer's token -> id, read only where needed (Qwen3's "yes" and "no")."""
    model_type = hf_config.get("model_type", "")
    architecture = _architecture(hf_config)
    if model_type == "qwen3" and architecture.endswith("ForCausalLM"):
        return _qwen3(model_dir, hf_config, st_cfg, vocab())
    if not architecture.endswith("ForSequenceClassification"):
        raise RerankerError(f"{architecture or model_type!r} is named a reranker, but only *ForSequenceClassification "
                            "cross-encoders (BERT, RoBERTa, XLM-RoBERTa, ModernBERT) and Qwen3-Reranker "
                            "(Qwen3ForCausalLM) are supported")
    if model_type not in _CLASSIFIER_HEADS:
        raise RerankerError(f"{architecture} cross-encoders are not supported (supported: "
                            f"{', '.join(sorted(_CLASSIFIER_HEADS))})")
    if _num_labels(hf_config) != 1:
        raise RerankerError(f"this cross-encoder has {_num_labels(hf_config)} labels; a reranker gives one score, so "
                            "only one-label cross-encoders are supported")
    modules = _modules(model_dir)
    if modules[1:]:
        raise RerankerError(f"a cross-encoder with modules after its Transformer ({', '.join(modules[1:])}) is not "
                            "supported")
    head = _CLASSIFIER_HEADS[model_type]
    if head != "modernbert_head":
        return Reranker(head, "cls", _activation(hf_config, st_cfg))
    pooling = hf_config.get("classifier_pooling", "cls")
    act = hf_config.get("classifier_activation", "gelu")
    if pooling not in ("cls", "mean") or act not in MODERNBERT_ACTIVATIONS:
        raise RerankerError(f"ModernBERT with classifier_pooling {pooling!r} and classifier_activation {act!r} is not "
                            f"supported (cls or mean; {', '.join(MODERNBERT_ACTIVATIONS)})")
    return Reranker(head, pooling, _activation(hf_config, st_cfg), classifier_activation=MODERNBERT_ACTIVATIONS[act])
