"""Qwen3 decoder stack on a packed stream: Qwen3-Embedding (causal) and pplx-embed (bidirectional).

The same layers serve both flavours; only the attention backend's `is_causal` differs,
and that is chosen by the loader from the checkpoint (see engine/model_files/loader.py), not here.
No KV cache, no LM head: the model returns the final-norm hidden state [T, hidden].
Mistral is this stack without the q/k norms (engine/rose/models/mistral.py).
"""

from __future__ import annotations

import torch
from torch import nn

from rose_embed.engine.model_files.architecture_support import config_refusal
from rose_embed.engine.rose.layers import fused
from rose_embed.engine.rose.quantization import fp8, fp8_fused
from rose_embed.engine.rose.attention.ragged import AttentionBackend, AttentionShape
from rose_embed.engine.rose.quantization.quantized_rows import QuantizedRows
from rose_embed.engine.rose.layers.norm import RMSNorm
from rose_embed.engine.rose.layers.rotary import RotaryBatch, RotaryEmbedding, interleave_rotary_halves, rope_theta
from rose_embed.engine.rose.models.weights import bare_tensors, load_exactly

# Checkpoints name the backbone's tensors bare (saved from Qwen3Model, e.g. Qwen3-Embedding,
# pplx-embed) or under `model.` (saved from Qwen3ForCausalLM); engine/rose/models/weights.py reads both.
# Tensors that belong to heads this engine never runs.
_IGNORED = ("lm_head.", "score.")


class Qwen3Attention(nn.Module):
    def __init__(self, hidden_size: int, num_heads: int, num_kv_heads: int, head_dim: int, bias: bool, eps: float,
                 qk_norm: bool = True, is_local: bool = False):
        super().__init__()
        self.is_local = is_local  # a layer of the attention shape's sliding window
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.q_size, self.kv_size = num_heads * head_dim, num_kv_heads * head_dim
        # q, k, v fused into one matmul: [hidden] -> [q_size + 2 * kv_size].
        self.qkv_proj = nn.Linear(hidden_size, self.q_size + 2 * self.kv_size, bias=bias)
        self.o_proj = nn.Linear(self.q_size, hidden_size, bias=bias)
        # Qwen3 normalises each head's q and k (over head_dim) before rotary.
        self.q_norm = RMSNorm(head_dim, eps) if qk_norm else None
        self.k_norm = RMSNorm(head_dim, eps) if qk_norm else None
        self.eps = eps

    def forward(self, x: torch.Tensor | QuantizedRows, rope: RotaryBatch, attention: AttentionBackend,
                meta: object) -> torch.Tensor:
        """x: the normed hidden state [T, hidden], as QuantizedRows where qkv_proj is FP8."""
        # q and k rows come in rotary pairs (see engine/rose/layers/rotary.py).
        norms = (self.q_norm.weight, self.k_norm.weight) if self.q_norm is not None else (None, None)
        qkv = self.qkv_proj(x)
        q, k, v = fused.qk_norm_rope(qkv, rope, *norms, self.num_heads, self.num_kv_heads, self.head_dim, self.eps)
        out = attention.forward(q, k, v, meta, local=self.is_local)
        return self.o_proj(out.reshape(qkv.shape[0], self.q_size))


class Qwen3MLP(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int):
        super().__init__()
        self.intermediate_size = intermediate_size
        # gate and up fused into one matmul: [hidden] -> [2 * intermediate].
        self.gate_up_proj = nn.Linear(hidden_size, 2 * intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, x: torch.Tensor | QuantizedRows) -> torch.Tensor:
        """x: the normed hidden state [T, hidden], as QuantizedRows where gate_up_proj is FP8."""
        gate_up = self.gate_up_proj(x)
        if fp8.wants_rows(self.down_proj):
            return self.down_proj(fp8_fused.act_and_mul_rows(gate_up, "silu", fp8.pooled_index(self.down_proj)))
        return self.down_proj(fused.silu_and_mul(gate_up))


class Qwen3DecoderLayer(nn.Module):
    def __init__(self, config: dict, head_dim: int, qk_norm: bool = True, is_local: bool = False):
        super().__init__()
        hidden, eps = config["hidden_size"], config.get("rms_norm_eps", 1e-6)
        self.input_layernorm = RMSNorm(hidden, eps)
        self.self_attn = Qwen3Attention(
            hidden, config["num_attention_heads"], config.get("num_key_value_heads") or config["num_attention_heads"],
            head_dim, bool(config.get("attention_bias", False)), eps, qk_norm, is_local,
        )
        self.post_attention_layernorm = RMSNorm(hidden, eps)
        self.mlp = Qwen3MLP(hidden, config["intermediate_size"])

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None, rope: RotaryBatch, attention: AttentionBackend,
                meta: object) -> tuple[torch.Tensor, torch.Tensor]:
        """(x, residual) -> (mlp output, residual stream): each residual add is fused into the
        norm after it, which updates `residual` in place (the first layer's residual is x)."""
        qkv_proj = self.self_attn.qkv_proj
        if residual is None:
            residual = x
            h = _add_norm(x, None, self.input_layernorm, qkv_proj) if fp8.wants_rows(qkv_proj) \
                else self.input_layernorm(x)
        else:
            h = _add_norm(x, residual, self.input_layernorm, qkv_proj)
        h = self.self_attn(h, rope, attention, meta)
        h = _add_norm(h, residual, self.post_attention_layernorm, self.mlp.gate_up_proj)
        return self.mlp(h), residual


def _add_norm(x: torch.Tensor, residual: torch.Tensor | None, norm: RMSNorm,
              reader: nn.Module | None = None) -> torch.Tensor | QuantizedRows:
    """rms_norm(x + residual), residual updated in place; as QuantizedRows alone where the linear
    that reads it (`reader`) is FP8 (nothing else reads the norm's output), with the pooled
    tokens' bf16 rows beside them where that linear keeps those tokens bf16."""
    if fp8.wants_rows(reader):
        return fp8_fused.rms_norm_rows(x, norm.weight, norm.variance_epsilon, residual=residual,
                                       pooled_index=fp8.pooled_index(reader))
    return fused.rms_norm(x, norm.weight, norm.variance_epsilon, residual=residual)


class Qwen3Model(nn.Module):
    """Qwen3 backbone returning the final-norm hidden state [T, hidden] of a packed batch.

    `qk_norm=False` and a causal `window` (every layer local) make it Mistral's."""

    name, architecture = "Qwen3", "qwen3"
    # Its FP8 producers hand on the pooled tokens' bf16 rows (engine/rose/quantization/fp8.py's PooledTokens).
    fp8_pooled_tokens_supported = True

    def __init__(self, config: dict, qk_norm: bool = True, window: tuple[int, int] | None = None):
        super().__init__()
        if refusal := config_refusal(self.architecture, config):
            raise ValueError(refusal)
        self.num_heads = config["num_attention_heads"]
        self.num_kv_heads = config.get("num_key_value_heads") or self.num_heads
        self.head_dim = config.get("head_dim") or config["hidden_size"] // self.num_heads
        self.qk_norm, self.window = qk_norm, window
        self.embed_tokens = nn.Embedding(config["vocab_size"], config["hidden_size"])
        self.layers = nn.ModuleList(Qwen3DecoderLayer(config, self.head_dim, qk_norm, is_local=window is not None)
                                    for _ in range(config["num_hidden_layers"]))
        self.norm = RMSNorm(config["hidden_size"], config.get("rms_norm_eps", 1e-6))
        self.rotary_emb = RotaryEmbedding(self.head_dim, config.get("max_position_embeddings", 32768), rope_theta(config))

    def attention_shape(self, is_causal: bool) -> AttentionShape:
        return AttentionShape(self.num_heads, self.num_kv_heads, self.head_dim, is_causal, window=self.window)

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, attention: AttentionBackend, meta: object
    ) -> torch.Tensor:
        x = self.embed_tokens(input_ids)
        fits = fused.rope_kernel_fits(self.head_dim, x)
        rope = self.rotary_emb.for_batch(positions, tables_only=fits)  # shared by all layers
        residual = None
        for layer in self.layers:
            x, residual = layer(x, residual, rope, attention, meta)
        return _add_norm(x, residual, self.norm)

    def load_hf_weights(self, state: dict[str, torch.Tensor]) -> None:
        """Load a Hugging Face Qwen3 state dict (bare or `model.`-prefixed names, any float
        dtype), fusing q/k/v and gate/up and putting q/k rotary pairs side by side. An LM
        head, tied or not, is ignored."""
        ours = bare_tensors(state, _IGNORED)
        renamed = {"embed_tokens.weight": ours.pop("embed_tokens.weight"), "norm.weight": ours.pop("norm.weight")}
        for i in range(len(self.layers)):
            p = f"layers.{i}."
            attn, mlp = p + "self_attn.", p + "mlp."
            for kind in ("weight", "bias"):
                if attn + f"q_proj.{kind}" in ours:
                    q, k, v = (ours.pop(attn + f"{n}_proj.{kind}") for n in "qkv")
                    renamed[attn + f"qkv_proj.{kind}"] = torch.cat([self._pairs(q), self._pairs(k), v])
            for n in ("q_norm", "k_norm") if self.qk_norm else ():
                renamed[attn + f"{n}.weight"] = self._pairs(ours.pop(attn + f"{n}.weight"))
            renamed[mlp + "gate_up_proj.weight"] = torch.cat([ours.pop(mlp + "gate_proj.weight"), ours.pop(mlp + "up_proj.weight")])
            for name in ("self_attn.o_proj.weight", "self_attn.o_proj.bias", "mlp.down_proj.weight",
                         "input_layernorm.weight", "post_attention_layernorm.weight"):
                if p + name in ours:
                    renamed[p + name] = ours.pop(p + name)
        load_exactly(self, renamed, ours, self.name)

    def _pairs(self, tensor: torch.Tensor) -> torch.Tensor:
        return interleave_rotary_halves(tensor, self.head_dim)
