"""Gemma3 text (EmbeddingGemma: `gemma3_text`, bidirectional, mean pooling) on a packed stream.

What differs from Qwen3 (engine/rose/models/qwen3.py), after Hugging Face's Gemma3TextModel:
- RMSNorm scales by (1 + weight), formed and applied in float32 (`weight_offset=1`), and
  each layer has four: before and after attention, before and after the MLP; q and k get
  their own per-head norm before rotary, as Qwen3's do;
- token embeddings are multiplied by sqrt(hidden_size), rounded to the weights' dtype;
- attention scores are scaled by query_pre_attn_scalar ** -0.5, not head_dim ** -0.5;
- the MLP is GeGLU with the tanh GELU (gelu_pytorch_tanh);
- layers are global or local (`layer_types`, or every `sliding_window_pattern`-th layer
  global), each kind with its rotary base (rope_parameters; 4.x: rope_theta and
  rope_local_base_freq). A causal local layer sees itself and the sliding_window - 1 keys
  before it; a bidirectional one (use_bidirectional_attention) the sliding_window // 2 keys
  on each side, bounds included: transformers halves the window for bidirectional models
  (Gemma3TextConfig: sliding_window // 2 + 1, exclusive).
Attention logit soft-capping is refused: no backend here runs it exactly (EmbeddingGemma has none).
"""

from __future__ import annotations

import torch
from torch import nn

from rose_embed.engine.model_files.architecture_support import GATED_ACTIVATIONS, config_refusal
from rose_embed.engine.rose.layers import fused
from rose_embed.engine.rose.attention.ragged import AttentionBackend, AttentionShape
from rose_embed.engine.rose.layers.rotary import GlobalLocalRotary, RotaryBatch, interleave_rotary_halves, rope_theta
from rose_embed.engine.rose.models.weights import bare_tensors, load_exactly

_IGNORED = ("lm_head.",)


def layer_types(config: dict) -> list[str]:
    if config.get("layer_types"):
        return list(config["layer_types"])
    every = config.get("sliding_window_pattern", 6)
    return ["sliding_attention" if (i + 1) % every else "full_attention" for i in range(config["num_hidden_layers"])]


class GemmaNorm(nn.Module):
    """x / rms(x) * (1 + weight); the stored weight is Hugging Face's, unchanged."""

    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(size))
        self.eps = eps

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        return fused.rms_norm(x, self.weight, self.eps, residual=residual, weight_offset=1.0)


class Gemma3Layer(nn.Module):
    def __init__(self, config: dict, head_dim: int, is_local: bool):
        super().__init__()
        hidden, eps = config["hidden_size"], config.get("rms_norm_eps", 1e-6)
        self.num_heads = config["num_attention_heads"]
        self.num_kv_heads = config.get("num_key_value_heads") or self.num_heads
        self.head_dim, self.is_local = head_dim, is_local
        self.act = GATED_ACTIVATIONS[config.get("hidden_activation", "gelu_pytorch_tanh")]
        bias = bool(config.get("attention_bias", False))
        self.q_size, kv_size = self.num_heads * head_dim, self.num_kv_heads * head_dim
        self.qkv_proj = nn.Linear(hidden, self.q_size + 2 * kv_size, bias=bias)  # q and k rows in rotary pairs
        self.o_proj = nn.Linear(self.q_size, hidden, bias=bias)
        self.q_norm, self.k_norm = GemmaNorm(head_dim, eps), GemmaNorm(head_dim, eps)
        self.input_layernorm = GemmaNorm(hidden, eps)
        self.post_attention_layernorm = GemmaNorm(hidden, eps)
        self.pre_feedforward_layernorm = GemmaNorm(hidden, eps)
        self.post_feedforward_layernorm = GemmaNorm(hidden, eps)
        intermediate = config["intermediate_size"]
        self.gate_up_proj = nn.Linear(hidden, 2 * intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor, residual: torch.Tensor, rope: RotaryBatch, attention: AttentionBackend,
                meta: object) -> torch.Tensor:
        """x: the previous layer's normed MLP output (the embeddings for the first), added into
        `residual` in place by the input norm -> this layer's normed MLP output."""
        h = self.input_layernorm(x, residual)
        q, k, v = fused.qk_norm_rope(self.qkv_proj(h), rope, self.q_norm.weight, self.k_norm.weight, self.num_heads,
                                     self.num_kv_heads, self.head_dim, self.q_norm.eps, weight_offset=1.0)
        h = self.o_proj(attention.forward(q, k, v, meta, local=self.is_local).reshape(x.shape[0], self.q_size))
        h = self.pre_feedforward_layernorm(self.post_attention_layernorm(h), residual)
        return self.post_feedforward_layernorm(self.down_proj(fused.act_and_mul(self.gate_up_proj(h), self.act)))


class Gemma3TextModel(nn.Module):
    """Gemma3 text backbone returning the final-norm hidden state [T, hidden] of a packed batch."""

    def __init__(self, config: dict):
        super().__init__()
        if refusal := config_refusal("gemma3", config):
            raise ValueError(refusal)
        rope_theta({"rope_scaling": config.get("rope_scaling")})  # refuses scaled RoPE (4.x configs)
        hidden = config["hidden_size"]
        self.num_heads = config["num_attention_heads"]
        self.num_kv_heads = config.get("num_key_value_heads") or self.num_heads
        self.head_dim = config.get("head_dim") or hidden // self.num_heads
        self.scale = float(config.get("query_pre_attn_scalar", 256)) ** -0.5
        self.sliding_window = config.get("sliding_window")
        # sqrt(hidden) as a buffer, so that `.to(dtype)` rounds it as the reference's is rounded.
        self.register_buffer("embed_scale", torch.tensor(hidden**0.5), persistent=False)
        self.embed_tokens = nn.Embedding(config["vocab_size"], hidden)
        self.layers = nn.ModuleList(Gemma3Layer(config, self.head_dim, kind == "sliding_attention")
                                    for kind in layer_types(config))
        self.norm = GemmaNorm(hidden, config.get("rms_norm_eps", 1e-6))
        self.rotary = GlobalLocalRotary(config, self.head_dim, config.get("max_position_embeddings", 131072),
                                        ("rope_theta", "rope_local_base_freq"), (1_000_000.0, 10_000.0))

    def attention_shape(self, is_causal: bool) -> AttentionShape:
        window = None
        if self.sliding_window and any(layer.is_local for layer in self.layers):
            half = self.sliding_window // 2
            window = (self.sliding_window - 1, 0) if is_causal else (half, half)
        return AttentionShape(self.num_heads, self.num_kv_heads, self.head_dim, is_causal, softmax_scale=self.scale,
                              window=window)

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, attention: AttentionBackend, meta: object
    ) -> torch.Tensor:
        x = self.embed_tokens(input_ids) * self.embed_scale
        residual = torch.zeros_like(x)  # the first input norm adds the embeddings into it
        fits = fused.rope_kernel_fits(self.head_dim, x)
        global_rope, local_rope = self.rotary.for_batch(positions, tables_only=fits)
        for layer in self.layers:
            x = layer(x, residual, local_rope if layer.is_local else global_rope, attention, meta)
        return self.norm(x, residual)

    def load_hf_weights(self, state: dict[str, torch.Tensor]) -> None:
        """Load a Hugging Face Gemma3TextModel / Gemma3ForCausalLM state dict (bare or
        `model.`-prefixed names), fusing q/k/v and gate/up and putting q/k rotary pairs side
        by side. An LM head is ignored, any other unknown tensor refused."""
        ours = bare_tensors(state, _IGNORED)
        renamed = {"embed_tokens.weight": ours.pop("embed_tokens.weight"), "norm.weight": ours.pop("norm.weight")}
        for i in range(len(self.layers)):
            p, attn, mlp = f"layers.{i}.", f"layers.{i}.self_attn.", f"layers.{i}.mlp."
            for kind in ("weight", "bias"):
                if attn + f"q_proj.{kind}" in ours:
                    q, k, v = (ours.pop(attn + f"{n}_proj.{kind}") for n in "qkv")
                    renamed[p + f"qkv_proj.{kind}"] = torch.cat([self._pairs(q), self._pairs(k), v])
                if attn + f"o_proj.{kind}" in ours:
                    renamed[p + f"o_proj.{kind}"] = ours.pop(attn + f"o_proj.{kind}")
            for n in ("q_norm", "k_norm"):
                renamed[p + f"{n}.weight"] = self._pairs(ours.pop(attn + f"{n}.weight"))
            renamed[p + "gate_up_proj.weight"] = torch.cat([ours.pop(mlp + "gate_proj.weight"),
                                                            ours.pop(mlp + "up_proj.weight")])
            renamed[p + "down_proj.weight"] = ours.pop(mlp + "down_proj.weight")
            for n in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                      "post_feedforward_layernorm"):
                renamed[p + f"{n}.weight"] = ours.pop(p + f"{n}.weight")
        load_exactly(self, renamed, ours, "Gemma3")

    def _pairs(self, tensor: torch.Tensor) -> torch.Tensor:
        return interleave_rotary_halves(tensor, self.head_dim)
