"""Tiny checkpoints laid out as the published Qwen3-Embedding and pplx-embed checkpoints are.

The field names, types and module entries below are the published files' own (where each
was read, and what could not be read, is in docs/models.md, "Checked against the
published checkpoints"); only the sizes are shrunk. Each checkpoint must load with its
model's flavour and give the Hugging Face reference's vectors on the same weights.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from rose_embed.engine.contract.config import EngineConfig
from rose_embed.engine.rose.engine import Engine
from rose_embed.engine.model_files.loader import ModelLoadError, load_spec
from tests.conftest import load_texts
from tests.support.qwen3_checkpoints import pplx_embed, qwen3_embedding, reference_pooled, train_tokenizer

pytestmark = pytest.mark.slow  # engines on the published layouts against their references

COSINE = 0.99999  # fp32 on both sides; only the summation order differs

# pplx-embed-v1 modules.json, byte for byte as published (the `kwargs` entry names the argument
# sentence-transformers passes through to st_quantize.FlexibleQuantizer.forward).
PPLX_MODULES = [
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    {"idx": 2, "name": "2", "path": "", "type": "st_quantize.FlexibleQuantizer", "kwargs": ["quantization"]},
]
QWEN3_EMBEDDING_MODULES = [
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
]
QWEN3_EMBEDDING_PROMPTS = {
    "query": "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:",
    "document": "",
}


def _pooling(mode: str) -> dict:
    # The field set sentence-transformers 3.x+ writes for 1_Pooling/config.json.
    modes = ("cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens", "weightedmean_tokens", "lasttoken")
    return {"word_embedding_dimension": 64, **{f"pooling_mode_{m}": m == mode for m in modes}, "include_prompt": True}


def _write(path: Path, value) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2), encoding="utf-8")


def _shape(config: dict) -> dict:
    """The tiny checkpoint's sizes, which the published configs carry under the same names."""
    keys = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "head_dim", "max_position_embeddings", "rms_norm_eps")
    return {k: config[k] for k in keys}


def as_published_pplx(path: Path, auto_model: str = "modeling.PPLXQwen3Model") -> Path:
    """pplx-embed-v1's layout: custom model_type and classes, transformers 5 `rope_parameters`,
    no config_sentence_transformers.json, the quantizer module after mean pooling."""
    tiny = json.loads((path / "config.json").read_text())
    _write(path / "config.json", {
        "architectures": ["PPLXQwen3Model"],
        "auto_map": {"AutoConfig": "configuration.PPLXQwen3Config", "AutoModel": auto_model},
        "model_type": "bidirectional_pplx_qwen3",
        "use_bidirectional_attention": True,
        "use_cache": False,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "hidden_act": "silu",
        "layer_types": ["full_attention"] * tiny["num_hidden_layers"],
        "rope_parameters": tiny["rope_parameters"],
        "sliding_window": None,
        "use_sliding_window": False,
        "tie_word_embeddings": True,
        "dtype": "float32",
        **_shape(tiny),
    })
    for name in ("config_sentence_transformers.json", "sentence_bert_config.json"):
        (path / name).unlink(missing_ok=True)
    _write(path / "modules.json", PPLX_MODULES)
    _write(path / "1_Pooling" / "config.json", _pooling("mean_tokens"))
    return path


def as_published_qwen3_embedding(path: Path) -> Path:
    """Qwen3-Embedding's layout: a plain Qwen3ForCausalLM config of transformers 4.51 (top-level
    `rope_theta`), last-token pooling, Normalize, the query/document prompts, no default prompt."""
    tiny = json.loads((path / "config.json").read_text())
    _write(path / "config.json", {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 0,
        "eos_token_id": 0,
        "hidden_act": "silu",
        "initializer_range": 0.02,
        "max_window_layers": 28,
        "rope_scaling": None,
        "rope_theta": tiny["rope_parameters"]["rope_theta"],
        "sliding_window": None,
        "use_sliding_window": False,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
        "transformers_version": "4.51.3",
        "use_cache": True,
        **_shape(tiny),
    })
    _write(path / "modules.json", QWEN3_EMBEDDING_MODULES)
    _write(path / "1_Pooling" / "config.json", _pooling("lasttoken"))
    _write(path / "config_sentence_transformers.json", {
        "prompts": QWEN3_EMBEDDING_PROMPTS, "default_prompt_name": None, "similarity_fn_name": "cosine",
        "__version__": {"sentence_transformers": "3.4.1", "transformers": "4.51.3", "pytorch": "2.6.0"},
    })
    return path


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(load_texts(300))


def _cosines(ours: np.ndarray, reference: torch.Tensor) -> np.ndarray:
    ref = reference.double().numpy()
    return (ours * ref).sum(1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(ref, axis=1))


TEXTS = ["Return the sum.", "  whitespace around  ", "Scientists explore the universe driven by curiosity. " * 4]


def test_pplx_embed_published_layout_loads_bidirectional_mean_int8(tmp_path, tok):
    ckpt = pplx_embed(tmp_path / "pplx", tok)
    as_published_pplx(ckpt.path)
    spec = load_spec(str(ckpt.path))
    assert (spec.architecture, spec.is_causal, spec.pooling) == ("qwen3", False, "mean")
    assert spec.quantization == "tanh" and not spec.normalize and not spec.append_end_token
    assert spec.prompts == {} and spec.default_prompt_name is None and spec.matryoshka_dims is None
    ours = Engine(EngineConfig(dtype="float32", model=str(ckpt.path), max_batch_tokens=1024)).embed(TEXTS)
    reference, _ = reference_pooled(ckpt, TEXTS)
    np.testing.assert_allclose(ours, reference.numpy(), rtol=1e-4, atol=1e-4)  # raw pooled: int8 reads its scale
    assert _cosines(ours, reference).min() >= COSINE


def test_qwen3_embedding_published_layout_loads_causal_last_token_with_prompts(tmp_path, tok):
    ckpt = qwen3_embedding(tmp_path / "qwen3", tok)
    as_published_qwen3_embedding(ckpt.path)
    spec = load_spec(str(ckpt.path))
    assert (spec.architecture, spec.is_causal, spec.pooling) == ("qwen3", True, "last")
    assert spec.append_end_token and spec.normalize and spec.quantization is None
    assert spec.prompts == QWEN3_EMBEDDING_PROMPTS and spec.default_prompt_name is None
    engine = Engine(EngineConfig(dtype="float32", model=str(ckpt.path), max_batch_tokens=1024))
    ours = engine.embed([QWEN3_EMBEDDING_PROMPTS["query"] + t for t in TEXTS])
    reference, _ = reference_pooled(ckpt, TEXTS, prompt=QWEN3_EMBEDDING_PROMPTS["query"])
    assert _cosines(ours, reference).min() >= COSINE


def test_pplx_embed_context_is_refused_by_name(tmp_path, tok):
    """The contextual variant embeds chunks within their document; served as independent texts it
    would give pplx-embed-v1-like vectors that are not its own."""
    ckpt = pplx_embed(tmp_path / "context", tok)
    as_published_pplx(ckpt.path, auto_model="modeling.PPLXQwen3ContextualModel")
    (ckpt.path / "modules.json").unlink()  # published for Transformers only, without sentence-transformers files
    with pytest.raises(ModelLoadError, match=r"PPLXQwen3ContextualModel.*pplx-embed-v1-0\.6b"):
        load_spec(str(ckpt.path))
