"""Tiny random-weight Qwen3 checkpoints on disk, in both flavours, with a real tokenizer.

Each checkpoint is what the hub ships for the real model, shrunk: config.json,
safetensors (one file or shards, fp32 or bf16, bare or `model.`-prefixed names),
tokenizer.json, and the sentence-transformers files. The Hugging Face model object that
wrote the weights is kept as the reference implementation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from tokenizers.processors import TemplateProcessing

if TYPE_CHECKING:
    from transformers import Qwen3Config, Qwen3Model

END_TOKEN = "<|endoftext|>"
QUERY_PROMPT = "Instruct: Given a docstring, find the function it documents\nQuery:"
MAX_SEQ_LEN = 256


def train_tokenizer(texts: list[str], vocab_size: int = 512, special_tokens: tuple[str, ...] = (END_TOKEN, "<|im_end|>")
                    ) -> Tokenizer:
    """A byte-level BPE like Qwen's, trained on the shared workload."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=list(special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    return tok


def with_end_token(tok: Tokenizer) -> Tokenizer:
    """A copy whose post-processor appends <|endoftext|>, as Qwen3-Embedding's tokenizer.json does."""
    copy = Tokenizer.from_str(tok.to_str())
    copy.post_processor = TemplateProcessing(
        single=f"$A:0 {END_TOKEN}:0", pair=f"$A:0 {END_TOKEN}:0 $B:1 {END_TOKEN}:1",
        special_tokens=[(END_TOKEN, tok.token_to_id(END_TOKEN))],
    )
    return copy


def tiny_config(vocab_size: int, **extra) -> Qwen3Config:
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=MAX_SEQ_LEN,
        rope_theta=5000.0, rms_norm_eps=1e-6, **extra,
    )


def randomize(model: torch.nn.Module, seed: int, emphasize: tuple[str, ...] = ()) -> None:
    """Weights far from their init, so that a mixed-up tensor would show: norm scales around 1,
    everything else around 0. Norm offsets stay small: a large one is shared by every token and
    would make all pooled vectors alike, so that any two texts' vectors (and a wrong one) had
    cosine ~1. Parameters whose names contain one of `emphasize` get 10x the scale (a bias too
    small to move the softmax could be misapplied unnoticed)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            is_norm = "norm" in name.lower()  # BERT's LayerNorm too
            if is_norm and name.endswith("bias"):
                p.copy_(0.02 * noise)
            elif is_norm:
                p.copy_(1.0 + 0.3 * noise)
            else:
                p.copy_(0.15 * noise * (10 if any(part in name for part in emphasize) else 1))


@dataclass
class Checkpoint:
    path: Path
    reference: Qwen3Model  # fp32, with the weights exactly as saved
    tokenizer: Tokenizer  # what the served model's tokenizer should produce (end token included)
    is_causal: bool
    pooling: str


def _write_json(path: Path, value) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=1), encoding="utf-8")


def _st_files(path: Path, pooling: str, quantizer: bool, prompts: dict | None) -> None:
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    if quantizer:
        modules.append({"idx": 2, "name": "2", "path": "", "type": "st_quantize.FlexibleQuantizer"})
    else:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
    _write_json(path / "modules.json", modules)
    _write_json(path / "1_Pooling" / "config.json", {
        "word_embedding_dimension": 64, "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": pooling == "mean", "pooling_mode_lasttoken": pooling == "last",
        "include_prompt": True,
    })
    _write_json(path / "sentence_bert_config.json", {"max_seq_length": MAX_SEQ_LEN, "do_lower_case": False})
    if prompts is not None:
        _write_json(path / "config_sentence_transformers.json",
                    {"prompts": prompts, "default_prompt_name": None, "similarity_fn_name": "cosine"})


def qwen3_embedding(path: Path, tok: Tokenizer, *, seed: int = 1, bf16: bool = False, sharded: bool = False,
                    tokenizer_appends_end: bool = True, matryoshka: list[int] | None = None) -> Checkpoint:
    """Qwen3-Embedding style: causal, last token, end token, query prompt.

    Saved from Qwen3ForCausalLM (names under `model.`, tied embeddings) unless bf16, which
    is saved untied with an lm_head to exercise both layouts.
    """
    from transformers import Qwen3ForCausalLM

    config = tiny_config(tok.get_vocab_size(), tie_word_embeddings=not bf16)
    model = Qwen3ForCausalLM(config)
    randomize(model, seed)
    if bf16:
        model = model.to(torch.bfloat16)
    model.save_pretrained(path, max_shard_size="60KB" if sharded else "2GB")
    if matryoshka is not None:
        cfg = json.loads((path / "config.json").read_text())
        cfg["matryoshka_dimensions"] = matryoshka
        _write_json(path / "config.json", cfg)
    served_tok = with_end_token(tok)
    (served_tok if tokenizer_appends_end else tok).save(str(path / "tokenizer.json"))
    _write_json(path / "tokenizer_config.json", {"eos_token": "<|im_end|>", "pad_token": END_TOKEN,
                                                 "model_max_length": 131072})
    _st_files(path, "last", quantizer=False, prompts={"query": QUERY_PROMPT, "document": ""})
    # The reference reads the checkpoint back the standard way (fp32 from bf16 files
    # included), rather than reusing the writer, whose rotary buffers a bf16 cast has rounded.
    reference = Qwen3ForCausalLM.from_pretrained(path, dtype=torch.float32).model.eval()
    return Checkpoint(path, reference, served_tok, is_causal=True, pooling="last")


def pplx_embed(path: Path, tok: Tokenizer, *, seed: int = 2) -> Checkpoint:
    """pplx-embed-v1 style: bidirectional, mean pooling, int8 quantizer module, no prompts.

    Saved from Qwen3Model (bare names), sharded, with the config pplx-embed ships
    (model_type bidirectional_pplx_qwen3, use_bidirectional_attention).
    """
    from transformers import Qwen3Model

    model = Qwen3Model(tiny_config(tok.get_vocab_size()))
    randomize(model, seed)
    model.save_pretrained(path, max_shard_size="60KB")
    cfg = json.loads((path / "config.json").read_text())
    cfg.update(model_type="bidirectional_pplx_qwen3", architectures=["PPLXQwen3Model"],
               use_bidirectional_attention=True, use_cache=False,
               auto_map={"AutoConfig": "configuration.PPLXQwen3Config", "AutoModel": "modeling.PPLXQwen3Model"})
    _write_json(path / "config.json", cfg)
    tok.save(str(path / "tokenizer.json"))
    _st_files(path, "mean", quantizer=True, prompts=None)
    return Checkpoint(path, model.eval(), tok, is_causal=False, pooling="mean")


@torch.no_grad()
def reference_pooled(ckpt: Checkpoint, texts: list[str], prompt: str = "", is_causal: bool | None = None,
                     pooling: str | None = None) -> tuple[torch.Tensor, list[int]]:
    """Hugging Face's vectors, one sequence at a time (no padding): [N, hidden] raw pooled, token counts.

    Bidirectional attention: a 4D all-zero additive mask, which transformers passes to
    attention as it is, so no causal mask is built and every token sees every token.
    """
    is_causal = ckpt.is_causal if is_causal is None else is_causal
    pooling = pooling or ckpt.pooling
    tok = Tokenizer.from_str(ckpt.tokenizer.to_str())
    tok.enable_truncation(MAX_SEQ_LEN)
    out, counts = [], []
    for text in texts:
        ids = tok.encode(prompt + text).ids  # no strip: whitespace is content for byte-level BPE
        counts.append(len(ids))
        mask = None if is_causal else torch.zeros(1, 1, len(ids), len(ids))
        hidden = ckpt.reference(input_ids=torch.tensor([ids]), attention_mask=mask).last_hidden_state[0]
        out.append(hidden[-1] if pooling == "last" else hidden.mean(0))
    return torch.stack(out), counts
