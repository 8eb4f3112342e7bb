"""Tiny random CLIP checkpoints saved by transformers' CLIPModel and CLIPProcessor themselves (and
packaged by sentence-transformers), with a real CLIP tokenizer over a small byte-level vocabulary.

The vocabulary is CLIP's layout shrunk: every byte alone and as a word's end ("</w>"), a few merges,
then <|startoftext|> and <|endoftext|> as the last two ids (so that the end token is the highest id,
as in OpenAI's checkpoints and as the legacy eos_token_id 2 configs rely on).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from tokenizers.pre_tokenizers import ByteLevel

MAX_TEXT_LEN = 40  # past the 32-token texts the server times its batches with at warm-up
IMAGE_SIZE = 32
_MERGES = [("t", "h"), ("th", "e</w>"), ("c", "a"), ("ca", "t</w>"), ("o", "g</w>"), ("d", "og</w>")]


def clip_tokenizer(max_len: int = MAX_TEXT_LEN):
    from transformers import CLIPTokenizer

    chars = sorted(ByteLevel.alphabet())
    vocab = {token: i for i, token in enumerate([*chars, *(c + "</w>" for c in chars),
                                                 *(a + b for a, b in _MERGES)])}
    vocab["<|startoftext|>"] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    return CLIPTokenizer(vocab=vocab, merges=list(_MERGES), model_max_length=max_len)


def save_clip(out: Path, *, legacy_eos: bool = False, image_processor: dict | None = None, seed: int = 0,
              text_act: str = "quick_gelu", vision_act: str = "quick_gelu", image_size: int = IMAGE_SIZE,
              patch_size: int = 8):
    """A transformers CLIPModel and CLIPProcessor saved to `out`; returns the model (eval, float32).
    `legacy_eos`: the text config's eos_token_id is 2, as configs written before transformers took the
    tokenizer's own (transformers then pools at each text's highest id)."""
    from transformers import CLIPConfig, CLIPImageProcessorPil, CLIPModel, CLIPProcessor

    tokenizer = clip_tokenizer()
    text = {"vocab_size": len(tokenizer), "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "max_position_embeddings": MAX_TEXT_LEN, "hidden_act": text_act,
            "bos_token_id": tokenizer.bos_token_id, "pad_token_id": tokenizer.pad_token_id,
            "eos_token_id": 2 if legacy_eos else tokenizer.eos_token_id}
    vision = {"hidden_size": 48, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
              "image_size": image_size, "patch_size": patch_size, "hidden_act": vision_act}
    torch.manual_seed(seed)
    model = CLIPModel(CLIPConfig(text_config=text, vision_config=vision, projection_dim=24)).eval()
    with torch.no_grad():  # LayerNorms and biases away from their 1 / 0 starts, so that loading them is tested
        for name, param in model.named_parameters():
            if name.endswith(("bias", "layer_norm1.weight", "layer_norm2.weight", "layrnorm.weight",
                              "layernorm.weight", "final_layer_norm.weight")):
                param.add_(0.1 * torch.randn_like(param))
    model.save_pretrained(out)
    settings = image_processor or {"size": {"shortest_edge": image_size},
                                   "crop_size": {"height": image_size, "width": image_size}}
    CLIPProcessor(image_processor=CLIPImageProcessorPil(**settings), tokenizer=tokenizer).save_pretrained(out)
    return model


def save_st_clip(hf_dir: Path, out: Path, legacy_module: bool = False) -> None:
    """sentence-transformers' own save of the CLIP model in `hf_dir`: its Transformer module (what 6.x makes
    of a CLIP checkpoint), or with `legacy_module` the CLIPModel module older models were saved with."""
    from sentence_transformers import SentenceTransformer

    if legacy_module:
        from sentence_transformers.sentence_transformer.modules import CLIPModel

        model = SentenceTransformer(modules=[CLIPModel(str(hf_dir))], device="cpu")
    else:
        model = SentenceTransformer(str(hf_dir), device="cpu")
    model.save(str(out))


def write_modules(folder: Path, modules: list[dict]) -> None:
    (folder / "modules.json").write_text(json.dumps(modules), encoding="utf-8")
