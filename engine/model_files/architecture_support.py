"""What each architecture's layers compute beyond their shapes, as config.json values: a
checkpoint that asks for anything else is refused by name, never served approximately.

load_spec asks before anything starts (this module imports no torch), so that such a
checkpoint is one line and an exit, as an unknown model_type is; the model classes ask again,
as they can be built without load_spec.
"""

from __future__ import annotations

from rose_embed.engine.model_files.clip import clip_refusal
from rose_embed.engine.model_files.siglip import siglip_refusal

# BERT family hidden_act -> torch's GELU `approximate`, or None for ReLU.
BERT_GELU_FORMS = {"gelu": "none", "gelu_new": "tanh", "gelu_pytorch_tanh": "tanh", "relu": None}
# ModernBERT and Gemma3 hidden_activation -> engine/rose/layers/fused.py act_and_mul's activation.
GATED_ACTIVATIONS = {"gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh", "gelu_new": "gelu_tanh", "silu": "silu"}

_DECODER_NAMES = {"qwen3": "Qwen3", "mistral": "Mistral"}


def config_refusal(architecture: str, config: dict) -> str | None:
    """Why the engine cannot run this config.json exactly (architecture: engine/model_files/loader.py's
    ARCHITECTURES values), or None if it can."""
    if architecture in ("bert", "mpnet", "distilbert"):
        key = "activation" if architecture == "distilbert" else "hidden_act"
        if config.get(key, "gelu") not in BERT_GELU_FORMS:
            return f"{config.get('model_type', architecture)} with {key} {config[key]!r} is not supported"
    elif architecture == "modernbert":
        if config.get("hidden_activation", "gelu") not in GATED_ACTIVATIONS:
            return f"ModernBERT with hidden_activation {config['hidden_activation']!r} is not supported"
    elif architecture == "gemma3":
        if config.get("attn_logit_softcapping") is not None:
            return "Gemma3 with attn_logit_softcapping is not supported (no exact attention backend for it)"
        if config.get("hidden_activation", "gelu_pytorch_tanh") not in GATED_ACTIVATIONS:
            return f"Gemma3 with hidden_activation {config['hidden_activation']!r} is not supported"
    elif architecture == "clip":
        return clip_refusal(config)
    elif architecture == "siglip":
        return siglip_refusal(config)
    elif architecture in _DECODER_NAMES:
        if config.get("hidden_act", "silu") != "silu":
            return f"{_DECODER_NAMES[architecture]} with hidden_act {config['hidden_act']!r} is not supported"
        if config.get("use_sliding_window"):
            return f"{_DECODER_NAMES[architecture]} with sliding-window attention is not supported"
    return None
