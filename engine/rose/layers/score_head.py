"""Token states -> a reranker's score per (query, document) pair, as the checkpoint's own head computes it.

The heads of engine/model_files/reranker.py, each with the Hugging Face tensors it reads from
the checkpoint's state dict:

  bert_pooler      tanh(pooler.dense([CLS])) -> classifier        (BertForSequenceClassification)
  roberta_head     tanh(classifier.dense(<s>)) -> classifier.out_proj   (RoBERTa, XLM-RoBERTa)
  modernbert_head  norm(act(head.dense(pooled))) -> classifier    (ModernBertForSequenceClassification)
  yes_no           the rows of "yes" and "no" of the LM head at the last token: logit(yes) - logit(no)

Like the sentence head (engine/rose/layers/head.py) it runs in float32 on the pooled [S, H]
states inside the model's CUDA graph. Each pair gives two numbers, [score, raw]: the logit after
the activation sentence-transformers' CrossEncoder.predict applies by default, and before it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rose_embed.engine.model_files.reranker import Reranker
from rose_embed.engine.rose.layers.pooling import pool_segments

_ACTIVATIONS = {"gelu": lambda x: F.gelu(x), "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
                "relu": F.relu, "silu": F.silu, "tanh": torch.tanh}


def _tensor(state: dict[str, torch.Tensor], name: str) -> torch.Tensor | None:
    """The tensor called `name`, under any of the prefixes a checkpoint puts before the backbone's
    names (bert., roberta., model.) or none."""
    for prefix in ("", "bert.", "roberta.", "model."):
        if prefix + name in state:
            return state[prefix + name].float()
    return None


def _required(state: dict[str, torch.Tensor], name: str) -> torch.Tensor:
    tensor = _tensor(state, name)
    if tensor is None:
        raise ValueError(f"the reranker's head needs the tensor {name!r}, which the checkpoint lacks")
    return tensor


def _linear(state: dict[str, torch.Tensor], name: str) -> nn.Linear:
    weight, bias = _required(state, f"{name}.weight"), _tensor(state, f"{name}.bias")
    linear = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
    with torch.no_grad():
        linear.weight.copy_(weight)
        if bias is not None:
            linear.bias.copy_(bias)
    return linear


class ScoreHead(nn.Module):
    """hidden [T, H], segment_ids [T] -> [num_segments, 2] float32: (score, raw logit) per pair."""

    def __init__(self, reranker: Reranker, state: dict[str, torch.Tensor], norm_eps: float = 1e-5):
        super().__init__()
        self.reranker = reranker
        self.activation = getattr(nn, reranker.activation)()
        head = reranker.head
        if head == "bert_pooler":
            self.dense, self.out = _linear(state, "pooler.dense"), _linear(state, "classifier")
        elif head == "roberta_head":
            self.dense, self.out = _linear(state, "classifier.dense"), _linear(state, "classifier.out_proj")
        elif head == "modernbert_head":
            self.dense, self.out = _linear(state, "head.dense"), _linear(state, "classifier")
            weight, bias = _required(state, "head.norm.weight"), _tensor(state, "head.norm.bias")
            self.norm = nn.LayerNorm(weight.shape[0], eps=norm_eps, bias=bias is not None)
            with torch.no_grad():
                self.norm.weight.copy_(weight)
                if bias is not None:
                    self.norm.bias.copy_(bias)
        elif head == "yes_no":
            lm_head = _tensor(state, "lm_head.weight")
            if lm_head is None:  # tied to the input embeddings
                lm_head = _required(state, "embed_tokens.weight")
            # [2, H]: only the two rows the score reads, not the whole vocabulary's.
            self.register_buffer("yes_no", lm_head[[reranker.yes_id, reranker.no_id]].clone())
        else:
            raise ValueError(f"unknown reranker head {head!r}")

    def forward(self, hidden: torch.Tensor, segment_ids: torch.Tensor, num_segments: int) -> torch.Tensor:
        pooled = pool_segments(hidden, segment_ids, num_segments, self.reranker.pooling)  # [S, H] float32
        head = self.reranker.head
        if head == "yes_no":
            logits = pooled @ self.yes_no.T  # [S, 2]
            raw = logits[:, 0] - logits[:, 1]
        else:
            x = self.dense(pooled)
            if head == "modernbert_head":
                x = self.norm(_ACTIVATIONS[self.reranker.classifier_activation](x))
            else:
                x = torch.tanh(x)
            raw = self.out(x)[:, 0]
        return torch.stack([self.activation(raw), raw], dim=1)
