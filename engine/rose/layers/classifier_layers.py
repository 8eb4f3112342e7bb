"""A `*ForSequenceClassification` head: pooled states [S, H] -> logits [S, num_labels], float32.

The heads of engine/model_files/classifier_heads.py, each with the Hugging Face tensors it reads
from the checkpoint's state dict:

  bert_pooler      tanh(pooler.dense([CLS])) -> classifier        (BertForSequenceClassification)
  roberta_head     tanh(classifier.dense(<s>)) -> classifier.out_proj   (RoBERTa, XLM-RoBERTa)
  modernbert_head  norm(act(head.dense(pooled))) -> classifier    (ModernBertForSequenceClassification)

A reranker's score head (score_head.py) and a classifier's label head (label_head.py) run it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

_ACTIVATIONS = {"gelu": lambda x: F.gelu(x), "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
                "relu": F.relu, "silu": F.silu, "tanh": torch.tanh}


def checkpoint_tensor(state: dict[str, torch.Tensor], name: str) -> torch.Tensor | None:
    """The tensor called `name`, under any of the prefixes a checkpoint puts before the backbone's
    names (bert., roberta., model.) or none, as float32."""
    for prefix in ("", "bert.", "roberta.", "model."):
        if prefix + name in state:
            return state[prefix + name].float()
    return None


def required_tensor(state: dict[str, torch.Tensor], name: str) -> torch.Tensor:
    tensor = checkpoint_tensor(state, name)
    if tensor is None:
        raise ValueError(f"the model's head needs the tensor {name!r}, which the checkpoint lacks")
    return tensor


def _linear(state: dict[str, torch.Tensor], name: str) -> nn.Linear:
    weight, bias = required_tensor(state, f"{name}.weight"), checkpoint_tensor(state, f"{name}.bias")
    linear = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
    with torch.no_grad():
        linear.weight.copy_(weight)
        if bias is not None:
            linear.bias.copy_(bias)
    return linear


class ClassifierLayers(nn.Module):
    """pooled [S, H] float32 -> logits [S, num_labels] float32. ValueError for an unknown head or a
    missing tensor."""

    def __init__(self, head: str, state: dict[str, torch.Tensor], classifier_activation: str | None = None,
                 norm_eps: float = 1e-5):
        super().__init__()
        self.head = head
        if head == "bert_pooler":
            self.dense, self.out = _linear(state, "pooler.dense"), _linear(state, "classifier")
        elif head == "roberta_head":
            self.dense, self.out = _linear(state, "classifier.dense"), _linear(state, "classifier.out_proj")
        elif head == "modernbert_head":
            self.activation = _ACTIVATIONS[classifier_activation]
            self.dense, self.out = _linear(state, "head.dense"), _linear(state, "classifier")
            weight, bias = required_tensor(state, "head.norm.weight"), checkpoint_tensor(state, "head.norm.bias")
            self.norm = nn.LayerNorm(weight.shape[0], eps=norm_eps, bias=bias is not None)
            with torch.no_grad():
                self.norm.weight.copy_(weight)
                if bias is not None:
                    self.norm.bias.copy_(bias)
        else:
            raise ValueError(f"unknown classifier head {head!r}")

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        x = self.dense(pooled)
        x = self.norm(self.activation(x)) if self.head == "modernbert_head" else torch.tanh(x)
        return self.out(x)
