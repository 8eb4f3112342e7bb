"""ModernBERT (nomic-ai/modernbert-embed-base, Alibaba-NLP/gte-modernbert-base) on a packed stream.

A pre-norm encoder: LayerNorms without bias (`norm_bias`), one fused Wqkv projection with
rotary q and k, GeGLU MLP, no biases in the linears by default. Layers alternate between
global attention and local attention over a window of `local_attention` tokens centred on
the query (every `global_attn_every_n_layers`-th layer, from the first, is global), and the
two kinds use their own rotary base (`global_rope_theta`, `local_rope_theta`; transformers
5.x writes `layer_types` and `rope_parameters` instead). A local query sees the
local_attention // 2 keys on each side of it, bounds included, as Hugging Face's
`sliding_window_bidirectional_overlay` says.
"""

from __future__ import annotations

import torch
from torch import nn

from rose_embed.engine.model_files.architecture_support import GATED_ACTIVATIONS, config_refusal
from rose_embed.engine.rose.layers import fused
from rose_embed.engine.rose.attention.ragged import AttentionBackend, AttentionShape
from rose_embed.engine.rose.layers.rotary import GlobalLocalRotary, RotaryBatch, interleave_rotary_halves
from rose_embed.engine.rose.models.weights import bare_tensors, load_exactly

_IGNORED = ("head.", "decoder.", "classifier.")  # heads this engine never runs


def layer_types(config: dict) -> list[str]:
    if config.get("layer_types"):
        return list(config["layer_types"])
    every = config.get("global_attn_every_n_layers", 3)
    return ["sliding_attention" if i % every else "full_attention" for i in range(config["num_hidden_layers"])]


class ModernBertLayer(nn.Module):
    def __init__(self, config: dict, is_first: bool, is_local: bool):
        super().__init__()
        hidden, intermediate = config["hidden_size"], config["intermediate_size"]
        eps, norm_bias = config.get("norm_eps", 1e-5), config.get("norm_bias", False)
        attention_bias, mlp_bias = config.get("attention_bias", False), config.get("mlp_bias", False)
        self.num_heads = config["num_attention_heads"]
        self.head_dim = hidden // self.num_heads
        self.is_local = is_local
        self.act = GATED_ACTIVATIONS[config.get("hidden_activation", "gelu")]
        self.attn_norm = None if is_first else nn.LayerNorm(hidden, eps=eps, bias=norm_bias)  # the first has none
        self.qkv_proj = nn.Linear(hidden, 3 * hidden, bias=attention_bias)  # Wqkv, q and k rows in rotary pairs
        self.o_proj = nn.Linear(hidden, hidden, bias=attention_bias)
        self.mlp_norm = nn.LayerNorm(hidden, eps=eps, bias=norm_bias)
        self.gate_up_proj = nn.Linear(hidden, 2 * intermediate, bias=mlp_bias)  # Wi: activated half first
        self.down_proj = nn.Linear(intermediate, hidden, bias=mlp_bias)

    def forward(self, x: torch.Tensor, rope: RotaryBatch, attention: AttentionBackend, meta: object) -> torch.Tensor:
        h = x if self.attn_norm is None else self.attn_norm(x)
        q, k, v = fused.qk_norm_rope(self.qkv_proj(h), rope, None, None, self.num_heads, self.num_heads,
                                     self.head_dim, 0.0)
        x = x + self.o_proj(attention.forward(q, k, v, meta, local=self.is_local).reshape(x.shape[0], -1))
        return x + self.down_proj(fused.act_and_mul(self.gate_up_proj(self.mlp_norm(x)), self.act))


class ModernBertModel(nn.Module):
    """Encoder returning the final-norm hidden state [T, hidden] of a packed batch."""

    def __init__(self, config: dict):
        super().__init__()
        if refusal := config_refusal("modernbert", config):
            raise ValueError(refusal)
        hidden, eps = config["hidden_size"], config.get("norm_eps", 1e-5)
        self.num_heads = config["num_attention_heads"]
        self.head_dim = hidden // self.num_heads
        self.half_window = config.get("local_attention", 128) // 2
        kinds = layer_types(config)
        self.embed_tokens = nn.Embedding(config["vocab_size"], hidden)
        self.embedding_norm = nn.LayerNorm(hidden, eps=eps, bias=config.get("norm_bias", False))
        self.layers = nn.ModuleList(ModernBertLayer(config, i == 0, kind == "sliding_attention")
                                    for i, kind in enumerate(kinds))
        self.final_norm = nn.LayerNorm(hidden, eps=eps, bias=config.get("norm_bias", False))
        self.rotary = GlobalLocalRotary(config, self.head_dim, config.get("max_position_embeddings", 8192),
                                        ("global_rope_theta", "local_rope_theta"), (160_000.0, 10_000.0))

    def attention_shape(self, is_causal: bool) -> AttentionShape:
        window = (self.half_window, self.half_window) if any(layer.is_local for layer in self.layers) else None
        return AttentionShape(self.num_heads, self.num_heads, self.head_dim, is_causal, window=window)

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, attention: AttentionBackend, meta: object
    ) -> torch.Tensor:
        x = self.embedding_norm(self.embed_tokens(input_ids))
        fits = fused.rope_kernel_fits(self.head_dim, x)
        global_rope, local_rope = self.rotary.for_batch(positions, tables_only=fits)
        for layer in self.layers:
            x = layer(x, local_rope if layer.is_local else global_rope, attention, meta)
        return self.final_norm(x)

    def load_hf_weights(self, state: dict[str, torch.Tensor]) -> None:
        """Load a Hugging Face ModernBertModel state dict (bare or `model.`-prefixed names);
        heads (masked LM, classifier) are ignored, any other unknown tensor refused."""
        ours = bare_tensors(state, _IGNORED)
        renamed = {}
        for hf, mine in (("embeddings.tok_embeddings.", "embed_tokens."), ("embeddings.norm.", "embedding_norm."),
                         ("final_norm.", "final_norm.")):
            for kind in ("weight", "bias"):
                if hf + kind in ours:
                    renamed[mine + kind] = ours.pop(hf + kind)
        hidden = self.num_heads * self.head_dim
        for i in range(len(self.layers)):
            hf, mine = f"layers.{i}.", f"layers.{i}."
            for kind in ("weight", "bias"):
                qkv = ours.pop(hf + f"attn.Wqkv.{kind}", None)
                if qkv is not None:  # q and k rows in rotary pairs; v as it is
                    q, k, v = qkv.split(hidden)
                    renamed[mine + f"qkv_proj.{kind}"] = torch.cat([self._pairs(q), self._pairs(k), v])
                for theirs, ours_name in (("attn.Wo", "o_proj"), ("attn_norm", "attn_norm"), ("mlp_norm", "mlp_norm"),
                                          ("mlp.Wi", "gate_up_proj"), ("mlp.Wo", "down_proj")):
                    if hf + f"{theirs}.{kind}" in ours:
                        renamed[mine + f"{ours_name}.{kind}"] = ours.pop(hf + f"{theirs}.{kind}")
        load_exactly(self, renamed, ours, "ModernBERT")

    def _pairs(self, tensor: torch.Tensor) -> torch.Tensor:
        return interleave_rotary_halves(tensor, self.head_dim)
