"""Whether a checkpoint is a sparse encoder (SPLADE), and how its sparse vectors are computed, read from its files.

A sentence-transformers SparseEncoder save (config_sentence_transformers.json `model_type:
SparseEncoder`, or a modules.json naming SparseEncoder's modules). The layout the engine
computes exactly, as `SparseEncoder.encode` does:

  MLMTransformer, or Transformer   the encoder and its masked-language-model head: a logit per
  with transformer_task fill-mask  vocabulary entry and token [T, V]
  SpladePooling                    log(1 + relu(logit)) (log1p once more for activation_function
                                   log1p_relu), max or sum pooled over the text's tokens: [V]

then, where config_sentence_transformers.json sets `max_active_dims` (or the server's
--max-active-dims does), only each text's largest that many values, as encode's top-k keeps.

The MLM heads run are those of BertForMaskedLM (naver's SPLADE models, opensearch's BERT-based
bi-encoders), DistilBertForMaskedLM (splade_v2_distil, opensearch's distilled bi-encoders) and
RobertaForMaskedLM / XLMRobertaForMaskedLM. The inference-free encoders' Router (a static weight
per query token, this layout for documents) is engine/model_files/sparse_router.py's. Refused by
name: SparseAutoEncoder (CSR: a top-k autoencoder on a dense embedder), SparseStaticEmbedding
alone, modules after SpladePooling, other architectures.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from rose_embed.engine.model_files.json_files import read_json
from rose_embed.engine.model_files.sparse_router import StaticQueries, read_router
from rose_embed.engine.model_files.st_modules import ModuleEntry, transformer_settings

# config.json model_type -> the MLM head its *ForMaskedLM class runs (engine/rose/layers/mlm_head.py).
MLM_HEADS = {"bert": "bert", "distilbert": "distilbert", "roberta": "roberta", "xlm-roberta": "roberta",
             "camembert": "roberta"}
# sentence-transformers' SparseEncoder modules, by class name: any of them marks a sparse checkpoint.
_SPARSE_MODULES = {"MLMTransformer", "SpladePooling", "SparseStaticEmbedding", "SparseAutoEncoder"}
_POOLINGS = ("max", "sum")
_ACTIVATIONS = ("relu", "log1p_relu")
# Without a top-k, a text's non-zero values are all handed out, up to this many: an answer row holds
# this many (index, value) slots. Trained SPLADE models are regularised to a small fraction of it; a
# text with more is refused with a 400 naming --max-active-dims, never cut short
# (server/pipeline/sparse_ask.py). The slots cost arena memory: each row is 1 + 2 x this many floats.
MAX_UNCUT_DIMS = 2048
# Token ids travel as float32 in the answer rows (engine/contract/sparse_rows.py): exact below 2**24.
_MAX_VOCAB = 2**24


class SparseError(ValueError):
    """A sparse checkpoint that the engine cannot compute exactly."""


@dataclass(frozen=True)
class SparseModel:
    """How a sparse encoder's vector is computed from the transformer's last hidden state."""

    mlm_head: str  # MLM_HEADS' values
    pooling: str  # "max" | "sum", over each text's tokens
    activation: str  # "relu": log1p(relu(x)); "log1p_relu": log1p(log1p(relu(x)))
    vocab_size: int  # V: the vector's dimensions, one per token id
    max_active_dims: int | None  # keep each text's largest this many (encode's top-k); None: every non-zero
    # An inference-free encoder's query side, a weight per token, and the side of a request that names
    # neither (engine/model_files/sparse_router.py); None: queries are encoded as documents are.
    queries: StaticQueries | None = None
    default_route: str = "document"

    @property
    def num_slots(self) -> int:
        """(index, value) pairs one answer row holds: the top-k, else every non-zero up to MAX_UNCUT_DIMS."""
        return min(self.vocab_size, self.max_active_dims or MAX_UNCUT_DIMS)


def _entries(model_dir: Path) -> list[ModuleEntry]:
    entries = read_json(model_dir / "modules.json")
    if not isinstance(entries, list):
        return []
    return [ModuleEntry(model_dir, entry, i) for i, entry in enumerate(entries) if isinstance(entry, dict)]


def is_sparse(model_dir: Path, st_cfg: dict) -> bool:
    """A SparseEncoder save, by its config or by its modules."""
    if st_cfg.get("model_type") == "SparseEncoder":
        return True
    return any(entry.cls in _SPARSE_MODULES for entry in _entries(model_dir))


def _refuse_layout(entries: list[ModuleEntry]) -> None:
    names = [entry.cls or entry.type for entry in entries]
    if "Router" in names or "Asym" in names:
        raise SparseError("a Router among other modules is not supported; only an inference-free encoder's lone "
                          "Router (engine/model_files/sparse_router.py) or MLMTransformer + SpladePooling are")
    if "SparseAutoEncoder" in names:
        raise SparseError("SparseAutoEncoder (CSR: a top-k autoencoder on a dense embedder's vector) is not supported; "
                          "only MLMTransformer + SpladePooling encoders are")
    if len(entries) != 2 or names[1] != "SpladePooling" or names[0] not in ("MLMTransformer", "Transformer"):
        raise SparseError(f"a sparse encoder with modules {names} is not supported; only MLMTransformer (or "
                          "Transformer with transformer_task fill-mask) followed by SpladePooling is")


def _splade_pooling(entry: ModuleEntry) -> tuple[str, str]:
    cfg = entry.config()
    pooling = cfg.get("pooling_strategy", "max")
    activation = cfg.get("activation_function", "relu")
    if pooling not in _POOLINGS:
        raise entry.error(f"pooling_strategy {pooling!r} is not supported ({', '.join(_POOLINGS)} are)")
    if activation not in _ACTIVATIONS:
        raise entry.error(f"activation_function {activation!r} is not supported ({', '.join(_ACTIVATIONS)} are)")
    return pooling, activation


def _max_active_dims(value, override: int | None) -> int | None:
    chosen = override if override is not None else value
    if chosen is None:
        return None
    if isinstance(chosen, bool) or not isinstance(chosen, int) or chosen < 1:
        raise SparseError(f"max_active_dims must be a positive integer; got {chosen!r}")
    return chosen


def read_sparse(model_dir: Path, hf_config: dict, st_cfg: dict,
                max_active_dims: int | None = None) -> tuple[SparseModel, int | None, bool]:
    """(how the sparse vector is computed, the Transformer's max_seq_length, its do_lower_case);
    SparseError (or ModuleError) names what cannot be computed exactly. `max_active_dims`: the
    server's top-k, which replaces the checkpoint's. `model_dir`: the checkpoint's own folder (for a
    Router, the one above its routes' folders)."""
    routed = read_router(model_dir)
    entries = routed.document if routed is not None else _entries(model_dir)
    _refuse_layout(entries)
    transformer, pooling_module = entries
    model_type = hf_config.get("model_type", "")
    if model_type not in MLM_HEADS:
        raise SparseError(f"sparse encoders on {model_type!r} are not supported (supported: "
                          f"{', '.join(sorted(MLM_HEADS))})")
    max_seq_length, lowercase = transformer_settings(transformer, "fill-mask", in_folder=routed is not None)
    pooling, activation = _splade_pooling(pooling_module)
    vocab_size = int(hf_config.get("vocab_size") or 0)
    if not 0 < vocab_size < _MAX_VOCAB:
        raise SparseError(f"vocab_size {vocab_size} is not supported (1 to {_MAX_VOCAB - 1})")
    top_k = _max_active_dims(st_cfg.get("max_active_dims"), max_active_dims)
    sparse = SparseModel(MLM_HEADS[model_type], pooling, activation, vocab_size, top_k)
    if routed is not None:
        sparse = replace(sparse, queries=routed.queries, default_route=routed.default_route)
    return sparse, max_seq_length, lowercase
