"""A masked-language model's head: token states [T, H] -> a logit per vocabulary entry [T, V].

The heads of engine/model_files/sparse.py's MLM_HEADS, each with the Hugging Face tensors it reads
from the checkpoint's state dict, all the same computation:

  bert        cls.predictions: transform.dense -> hidden_act -> transform.LayerNorm -> decoder + bias
  distilbert  vocab_transform -> activation -> vocab_layer_norm -> vocab_projector
  roberta     lm_head: dense -> GELU -> layer_norm -> decoder + bias      (RoBERTa, XLM-R, CamemBERT)

The decoder is tied to the word embeddings in every such checkpoint, and a tied tensor is saved
once: where the decoder's own weight is absent, the embeddings' is read.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rose_embed.engine.model_files.architecture_support import BERT_GELU_FORMS

# head -> (dense, layer norm, decoder weight, decoder bias), each a list of names tried in order.
_TENSORS = {
    "bert": ("cls.predictions.transform.dense", "cls.predictions.transform.LayerNorm",
             ("cls.predictions.decoder.weight", "bert.embeddings.word_embeddings.weight",
              "embeddings.word_embeddings.weight"),
             ("cls.predictions.decoder.bias", "cls.predictions.bias")),
    "distilbert": ("vocab_transform", "vocab_layer_norm",
                   ("vocab_projector.weight", "distilbert.embeddings.word_embeddings.weight"),
                   ("vocab_projector.bias",)),
    "roberta": ("lm_head.dense", "lm_head.layer_norm",
                ("lm_head.decoder.weight", "roberta.embeddings.word_embeddings.weight"),
                ("lm_head.decoder.bias", "lm_head.bias")),
}


def _first(state: dict[str, torch.Tensor], names: tuple[str, ...]) -> torch.Tensor:
    for name in names:
        if name in state:
            return state[name]
    raise ValueError(f"the MLM head needs the tensor {names[0]!r}, which the checkpoint lacks")


def _activation_form(head: str, hf_config: dict) -> str | None:
    """torch's GELU `approximate` ("none" | "tanh"), or None for ReLU."""
    if head == "roberta":
        return "none"  # RobertaLMHead applies exact GELU whatever hidden_act says
    key = "activation" if head == "distilbert" else "hidden_act"
    act = hf_config.get(key, "gelu")
    if act not in BERT_GELU_FORMS:
        raise ValueError(f"an MLM head with {key} {act!r} is not supported ({', '.join(BERT_GELU_FORMS)} are)")
    return BERT_GELU_FORMS[act]


# The decoder's rows are padded to a multiple of this: a vocabulary such as BERT's 30,522 leaves the
# logits' rows misaligned for the GPU's GEMM kernels, which then run at a fraction of their speed.
_ROW_MULTIPLE = 128


class MLMHead(nn.Module):
    """hidden [T, H] -> logits [T, padded_vocab_size] in the dtype of its weights (the model's): the first
    vocab_size columns are the model's logits, the rest (padding, for the GEMM's alignment) are zeros."""

    def __init__(self, head: str, hf_config: dict, state: dict[str, torch.Tensor]):
        super().__init__()
        dense, norm, decoder_weight, decoder_bias = _TENSORS[head]
        self.gelu_form = _activation_form(head, hf_config)
        weight = _first(state, (f"{dense}.weight",))
        self.dense = nn.Linear(weight.shape[1], weight.shape[0])
        # DistilBERT's vocab_layer_norm has a fixed eps; the others take the config's.
        eps = 1e-12 if head == "distilbert" else hf_config.get("layer_norm_eps", 1e-12)
        self.norm = nn.LayerNorm(weight.shape[0], eps=eps)
        decoder = _first(state, decoder_weight)
        self.vocab_size = decoder.shape[0]
        padded = -(-self.vocab_size // _ROW_MULTIPLE) * _ROW_MULTIPLE
        self.decoder = nn.Linear(decoder.shape[1], padded)
        with torch.no_grad():
            self.dense.weight.copy_(weight)
            self.dense.bias.copy_(_first(state, (f"{dense}.bias",)))
            self.norm.weight.copy_(_first(state, (f"{norm}.weight",)))
            self.norm.bias.copy_(_first(state, (f"{norm}.bias",)))
            self.decoder.weight.zero_()
            self.decoder.bias.zero_()
            self.decoder.weight[: self.vocab_size].copy_(decoder)
            self.decoder.bias[: self.vocab_size].copy_(_first(state, decoder_bias))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        x = self.dense(hidden)
        x = F.relu(x) if self.gelu_form is None else F.gelu(x, approximate=self.gelu_form)
        return self.decoder(self.norm(x))
