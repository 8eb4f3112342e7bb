"""BERT family encoders (BERT, MiniLM, BGE, E5, GTE-classic, RoBERTa, XLM-R) on a packed stream."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rose_embed.engine.model_files.architecture_support import BERT_GELU_FORMS, config_refusal
from rose_embed.engine.rose.layers import fused
from rose_embed.engine.rose.layers.cpu_packed_linear import PackedLinear
from rose_embed.engine.rose.quantization import fp8, fp8_fused
from rose_embed.engine.rose.attention.ragged import AttentionBackend, AttentionShape
from rose_embed.engine.rose.quantization.quantized_rows import QuantizedRows

_ROBERTA_TYPES = ("roberta", "xlm-roberta", "camembert")


class BertLayer(nn.Module):
    def __init__(self, hidden: int, intermediate: int, num_heads: int, eps: float, act: str):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, hidden // num_heads
        self.qkv_proj = nn.Linear(hidden, 3 * hidden)  # query, key, value fused
        self.o_proj = nn.Linear(hidden, hidden)
        self.attention_norm = nn.LayerNorm(hidden, eps=eps)
        self.up_proj = nn.Linear(hidden, intermediate)
        self.down_proj = nn.Linear(intermediate, hidden)
        self.mlp_norm = nn.LayerNorm(hidden, eps=eps)
        self.gelu_form = BERT_GELU_FORMS[act]

    def forward(self, x: torch.Tensor, attention: AttentionBackend, meta: object,
                position_bias: torch.Tensor | None = None, rows: QuantizedRows | None = None,
                output_rows: bool = False) -> tuple[torch.Tensor, QuantizedRows | None]:
        """x [T, hidden] -> (the layer's output, and that output as QuantizedRows where
        `output_rows` asks: the next layer's qkv projection is FP8). `rows` is x so quantized,
        where this layer's qkv projection is FP8 (engine/rose/quantization/fp8.py)."""
        num_tokens = x.shape[0]
        q, k, v = self.qkv_proj(x if rows is None else rows).view(num_tokens, 3, self.num_heads,
                                                                   self.head_dim).unbind(1)
        attn = attention.forward(q, k, v, meta, position_bias=position_bias).reshape(num_tokens, -1)
        x, rows = _add_norm(self.o_proj(attn), x, self.attention_norm, fp8.wants_rows(self.up_proj),
                            fp8.input_scale_of(self.up_proj))
        return _add_norm(self.down_proj(self._up(x, rows)), x, self.mlp_norm, output_rows)

    def _up(self, x: torch.Tensor, rows: QuantizedRows | None = None) -> torch.Tensor | QuantizedRows:
        """The up projection and its activation [T, intermediate], quantized where the down projection is FP8."""
        if fp8.wants_rows(self.up_proj):
            activation = fp8_fused.BERT_ACTIVATIONS[self.gelu_form]
            if fp8.wants_rows(self.down_proj) and rows is not None:
                # One GEMM whose epilogue activates and quantizes: no bf16 intermediate, no pass of its own.
                return fp8_fused.linear_activation_rows(self.up_proj, rows, activation)
            h = self.up_proj(x if rows is None else rows)  # bf16, its bias added in the GEMM
            if fp8.wants_rows(self.down_proj):
                return fp8_fused.activation_rows(h, activation)
            return fp8_fused.activation(h, activation)
        if self.gelu_form is None:
            h = F.relu(self.up_proj(x))
        elif not isinstance(self.up_proj, nn.Linear):  # an int8 layer (engine/rose/quantization/int8.py)
            h = F.gelu(self.up_proj(x), approximate=self.gelu_form)
        elif isinstance(self.up_proj, PackedLinear):  # bf16 on the CPU: the GELU in oneDNN's epilogue
            h = self.up_proj.gelu(x, self.gelu_form)
        else:
            h = fused.linear_gelu(x, self.up_proj.weight, self.up_proj.bias, self.gelu_form)
        return fp8.quantize_rows(h) if fp8.wants_rows(self.down_proj) else h


def as_bert_names(state: dict[str, torch.Tensor], prefix: str, layer_root: str,
                  layer_names: dict[str, str]) -> dict[str, torch.Tensor]:
    """A BERT-shaped encoder's tensors under BertModel's Hugging Face names: `prefix` dropped,
    `{layer_root}N.{module}.{kind}` -> `encoder.layer.N.{layer_names[module]}.{kind}`."""
    renamed = {}
    for name, tensor in state.items():
        name = name.removeprefix(prefix)
        if name.startswith(layer_root):
            index, rest = name[len(layer_root):].split(".", 1)
            module, kind = rest.rsplit(".", 1)
            name = f"encoder.layer.{index}.{layer_names.get(module, module)}.{kind}"
        renamed[name] = tensor
    return renamed


def _add_norm(x: torch.Tensor, residual: torch.Tensor, norm: nn.LayerNorm, output_rows: bool = False,
              scale: torch.Tensor | None = None) -> tuple[torch.Tensor, QuantizedRows | None]:
    """layer_norm(x + residual), and the same as QuantizedRows where `output_rows` asks (at the one
    `scale` given, else a scale per row)."""
    if output_rows:
        return fp8_fused.add_layer_norm_rows(x, residual, norm.weight, norm.bias, norm.eps, scale)
    return fused.add_layer_norm(x, residual, norm.weight, norm.bias, norm.eps), None


class BertModel(nn.Module):
    """Encoder returning the last hidden state [T, hidden] of a packed batch.

    Also the body of the BERT-shaped encoders that differ only in names and embeddings
    (engine/rose/models/distilbert.py, engine/rose/models/mpnet.py): they pass `position_offset`,
    drop token types (`type_vocab_size` 0) and, for MPNet, set `relative_bias`.
    """

    # An FP8 up projection's input is the attention norm's output: it can take one scale, bounded
    # at load, and so its GEMM can finish GELU and quantization; the down projection then reads that
    # output at its one scale (engine/rose/quantization/fp8_plan.py).
    fp8_one_scale_inputs = {"up_proj": "attention_norm"}
    fp8_one_scale_after = {"down_proj": "up_proj"}
    # Each residual add is normalised (post-norm): an early layer's rounding error does not run on
    # through the stack, so FP8 keeps no bf16 layers at its start (engine/rose/quantization/fp8_plan.py).
    normalises_each_residual = True

    def __init__(self, config: dict, position_offset: int | None = None, token_types_in_ids: bool = False):
        super().__init__()
        # A cross-encoder's pair: ids of the second text come as id + vocab_size (engine/text/pairs.py),
        # which selects the second token-type row; otherwise every token has the first.
        self.token_types_in_ids = token_types_in_ids
        if refusal := config_refusal("bert", config):
            raise ValueError(refusal)
        hidden = config["hidden_size"]
        eps = config.get("layer_norm_eps", 1e-12)
        self.num_heads = config["num_attention_heads"]
        self.word_embeddings = nn.Embedding(config["vocab_size"], hidden)
        self.position_embeddings = nn.Embedding(config["max_position_embeddings"], hidden)
        self.token_type_embeddings = None
        if config.get("type_vocab_size", 1) != 0:
            self.token_type_embeddings = nn.Embedding(max(config.get("type_vocab_size", 1), 1), hidden)
        self.embedding_norm = nn.LayerNorm(hidden, eps=eps)
        # RoBERTa counts positions from padding_idx + 1.
        is_roberta = config.get("model_type") in _ROBERTA_TYPES
        if position_offset is None:
            position_offset = (config.get("pad_token_id", 1) + 1) if is_roberta else 0
        self.position_offset = position_offset
        self.relative_bias: torch.Tensor | None = None  # [heads, 2R + 1], MPNet's
        self.layers = nn.ModuleList(
            BertLayer(hidden, config["intermediate_size"], self.num_heads, eps, config.get("hidden_act", "gelu"))
            for _ in range(config["num_hidden_layers"])
        )

    def attention_shape(self, is_causal: bool) -> AttentionShape:
        head_dim = self.word_embeddings.embedding_dim // self.num_heads
        return AttentionShape(self.num_heads, self.num_heads, head_dim, is_causal)

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, attention: AttentionBackend, meta: object
    ) -> torch.Tensor:
        x, rows = self._embed(input_ids, positions, self._takes_rows(0))
        for i, layer in enumerate(self.layers):
            x, rows = layer(x, attention, meta, self.relative_bias, rows, output_rows=self._takes_rows(i + 1))
        return x

    def _takes_rows(self, index: int) -> bool:
        """Whether layer `index` (if there is one) takes its input as QuantizedRows (an FP8 qkv projection)."""
        return index < len(self.layers) and fp8.wants_rows(self.layers[index].qkv_proj)

    def _embed(self, input_ids: torch.Tensor, positions: torch.Tensor,
               output_rows: bool) -> tuple[torch.Tensor, QuantizedRows | None]:
        """The embeddings [T, hidden], and as QuantizedRows where `output_rows` asks."""
        if self.token_types_in_ids:
            x = self._embed_pairs(input_ids, positions)
            return x, fp8.quantize_rows(x) if output_rows else None
        norm = self.embedding_norm
        token_type = None if self.token_type_embeddings is None else self.token_type_embeddings.weight[0]
        args = (input_ids, positions, self.word_embeddings.weight, self.position_embeddings.weight, token_type,
                self.position_offset, norm.weight, norm.bias, norm.eps)
        if output_rows:
            return fp8_fused.embed_layer_norm_rows(*args)
        return fused.embed_layer_norm(*args), None

    def _embed_pairs(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Embeddings with each token's type read from its id: (word + type) + position, in Hugging Face's order."""
        vocab_size = self.word_embeddings.num_embeddings
        is_second = input_ids >= vocab_size
        word = F.embedding(torch.where(is_second, input_ids - vocab_size, input_ids), self.word_embeddings.weight)
        x = word + F.embedding(is_second.long(), self.token_type_embeddings.weight)
        x = x + F.embedding(positions + self.position_offset, self.position_embeddings.weight)
        norm = self.embedding_norm
        return F.layer_norm(x, (x.shape[1],), norm.weight, norm.bias, norm.eps)

    def load_hf_weights(self, state: dict[str, torch.Tensor]) -> None:
        """Load a Hugging Face BertModel / RobertaModel state dict (fusing q, k, v)."""
        self.load_state_dict(self._renamed(state), strict=True)

    def _renamed(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        ours = {}
        for name, tensor in state.items():
            for prefix in ("bert.", "roberta.", "model."):
                if name.startswith(prefix):
                    name = name[len(prefix) :]
            ours[name] = tensor
        renamed = {
            "word_embeddings.weight": ours["embeddings.word_embeddings.weight"],
            "position_embeddings.weight": ours["embeddings.position_embeddings.weight"],
            "embedding_norm.weight": ours["embeddings.LayerNorm.weight"],
            "embedding_norm.bias": ours["embeddings.LayerNorm.bias"],
        }
        if self.token_type_embeddings is not None:
            renamed["token_type_embeddings.weight"] = ours.get(
                "embeddings.token_type_embeddings.weight", self.token_type_embeddings.weight.detach() * 0
            )
        for i in range(len(self.layers)):
            hf, mine = f"encoder.layer.{i}.", f"layers.{i}."
            for kind in ("weight", "bias"):
                renamed[mine + f"qkv_proj.{kind}"] = torch.cat(
                    [ours[hf + f"attention.self.{n}.{kind}"] for n in ("query", "key", "value")]
                )
                renamed[mine + f"o_proj.{kind}"] = ours[hf + f"attention.output.dense.{kind}"]
                renamed[mine + f"attention_norm.{kind}"] = ours[hf + f"attention.output.LayerNorm.{kind}"]
                renamed[mine + f"up_proj.{kind}"] = ours[hf + f"intermediate.dense.{kind}"]
                renamed[mine + f"down_proj.{kind}"] = ours[hf + f"output.dense.{kind}"]
                renamed[mine + f"mlp_norm.{kind}"] = ours[hf + f"output.LayerNorm.{kind}"]
        return renamed
