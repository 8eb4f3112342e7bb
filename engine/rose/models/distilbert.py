"""DistilBERT (msmarco-distilbert-*, multi-qa-distilbert-*): BERT's layers under other names.

The same post-norm encoder as engine/rose/models/bert.py with learned positions from 0 and no
token types; only the config keys and tensor names differ, so this file renames both.
"""

from __future__ import annotations

import torch

from rose_embed.engine.rose.models.bert import BertModel, as_bert_names

# Hugging Face DistilBERT tensor name (inside transformer.layer.N.) -> BERT's.
_LAYER_NAMES = {
    "attention.q_lin": "attention.self.query",
    "attention.k_lin": "attention.self.key",
    "attention.v_lin": "attention.self.value",
    "attention.out_lin": "attention.output.dense",
    "sa_layer_norm": "attention.output.LayerNorm",
    "ffn.lin1": "intermediate.dense",
    "ffn.lin2": "output.dense",
    "output_layer_norm": "output.LayerNorm",
}


def bert_config(config: dict) -> dict:
    """DistilBertConfig's keys as BertConfig's (its LayerNorms' eps is fixed at 1e-12)."""
    return {
        "vocab_size": config["vocab_size"],
        "hidden_size": config["dim"],
        "intermediate_size": config["hidden_dim"],
        "num_hidden_layers": config["n_layers"],
        "num_attention_heads": config["n_heads"],
        "max_position_embeddings": config["max_position_embeddings"],
        "hidden_act": config.get("activation", "gelu"),
        "layer_norm_eps": 1e-12,
        "type_vocab_size": 0,
    }


class DistilBertModel(BertModel):
    def __init__(self, config: dict):
        super().__init__(bert_config(config), position_offset=0)

    def _renamed(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return super()._renamed(as_bert_names(state, "distilbert.", "transformer.layer.", _LAYER_NAMES))
