"""SigLIP dual encoders (SiglipModel: SigLIP, and SigLIP 2's fixed-resolution checkpoints, which are the
same model with a Gemma tokenizer): a text tower and a vision tower whose vectors share one space.

Recognized from config.json model_type "siglip" with text_config and vision_config. Siglip2Model
(model_type "siglip2", the NaFlex checkpoints) is refused by name: it embeds each image at its own
resolution and aspect ratio, a sequence of its own length with a mask over the padded patches, which
the fixed-shape vision batches do not follow.

A text's vector is transformers' get_text_features for the call SigLIP's model cards and transformers'
zero-shot pipeline make: tokenizer(texts, padding="max_length", max_length=64, truncation=True), every
array the tokenizer returns passed on. The text tower is bidirectional and reads the LAST position of
that padded sequence, through `head`; so where padding lies and whether the tokenizer returns an
attention mask change the vector, and both are read from tokenizer_config.json (padding_side, else the
tokenizer class's default; model_input_names):
- left padding with an attention mask (GemmaTokenizer's own default, SigLIP 2's tokenizer class): the pads
  are masked out and the last position is the text's end token, at position 63. The text alone is
  run, its positions shifted to end at max_seq_len - 1 (engine/rose/models/siglip.py).
- no attention mask (the pads are attended to, as the model was trained): the text is padded with the
  tokenizer's pad id to max_seq_len on its side (engine/text/tokenizer.py) and run whole.
- right padding with an attention mask is refused: the vector is then a padding token's state that
  attends to the text but is attended to by nothing, which the packed attention cannot compute.
max_seq_len is text_config.max_position_embeddings (64: the length the model was trained with and the
pipeline pads to).

SigLIP's original tokenizer (SiglipTokenizer, tokenizer_config.json tokenizer_class "SiglipTokenizer":
SentencePiece over a text that Python canonicalizes, lowercased and with punctuation removed) ships no
tokenizer.json: its texts are tokenized from spiece.model (engine/model_files/siglip_tokenizer.py reads
it, engine/text/siglip_texts.py follows the class step for step); it pads on the right, with "</s>".

An image's vector is get_image_features: the patches (no class token) through the pre-norm blocks,
post_layernorm and the attention-pooling head. Reads JSON, tokenizer.json and spiece.model only: no torch,
so that a front end may ask.
"""

from __future__ import annotations

from pathlib import Path

from rose_embed.engine.model_files.clip import (
    CLIP_ACTIVATIONS,
    ClipError,
    ClipModel,
    TextPadding,
    read_tower_image_processor,
)
from rose_embed.engine.model_files.json_files import read_json_object
from rose_embed.engine.model_files.siglip_tokenizer import (
    SIGLIP_TOKENIZER_CLASS, SiglipTokenizerFiles, read_siglip_tokenizer,
)
from rose_embed.engine.model_files.tokenizer_file import read_tokenizer

SIGLIP_MODEL_TYPE = "siglip"
SIGLIP2_NAFLEX_REFUSAL = ("model_type 'siglip2' (Siglip2Model, SigLIP 2's NaFlex checkpoints) is not supported: "
                          "it embeds each image at its own resolution and aspect ratio, which fixed-shape image "
                          "batches do not follow; SigLIP 2's fixed-resolution checkpoints (model_type 'siglip') are")
# SiglipTextConfig's and SiglipVisionConfig's defaults for what config.json may leave out.
TEXT_DEFAULTS = {"vocab_size": 32000, "hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
                 "num_attention_heads": 12, "max_position_embeddings": 64, "hidden_act": "gelu_pytorch_tanh",
                 "layer_norm_eps": 1e-6}
VISION_DEFAULTS = {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12, "num_attention_heads": 12,
                   "image_size": 224, "patch_size": 16, "hidden_act": "gelu_pytorch_tanh", "layer_norm_eps": 1e-6}
# The tokenizer classes whose behaviour is all in tokenizer.json (Siglip2Tokenizer's lowercasing aside, which
# transformers adds when it loads one), with the side each pads on where tokenizer_config.json names none.
_TOKENIZER_PADDING_SIDES = {"GemmaTokenizer": "left", "GemmaTokenizerFast": "left", "Siglip2Tokenizer": "left",
                            SIGLIP_TOKENIZER_CLASS: "right"}
LOWERCASING_TOKENIZERS = ("Siglip2Tokenizer",)


def is_siglip(hf_config: dict) -> bool:
    return hf_config.get("model_type") == SIGLIP_MODEL_TYPE


def text_tower(hf_config: dict) -> dict:
    return {**TEXT_DEFAULTS, **hf_config["text_config"]}


def vision_tower(hf_config: dict) -> dict:
    return {**VISION_DEFAULTS, **hf_config["vision_config"]}


def siglip_refusal(config: dict) -> str | None:
    """Why the engine cannot run this SigLIP config.json exactly, or None (engine/model_files/architecture_support.py)."""
    if not isinstance(config.get("text_config"), dict) or not isinstance(config.get("vision_config"), dict):
        return "a SigLIP config.json needs text_config and vision_config"
    text, vision = text_tower(config), vision_tower(config)
    for name, tower in (("text", text), ("vision", vision)):
        if tower["hidden_act"] not in CLIP_ACTIVATIONS:
            return (f"SigLIP with {name}_config hidden_act {tower['hidden_act']!r} is not supported "
                    f"(supported: {', '.join(CLIP_ACTIVATIONS)})")
    for key in ("image_size", "patch_size"):
        if not isinstance(vision[key], int):
            return f"SigLIP with vision_config {key} {vision[key]!r} is not supported (square images and patches are)"
    if vision.get("num_channels", 3) != 3:
        return f"SigLIP with vision_config num_channels {vision['num_channels']} is not supported (RGB images have 3)"
    if not vision.get("vision_use_head", True):
        return "SigLIP with vision_config vision_use_head false has no image vector (get_image_features gives none)"
    projection = text.get("projection_size") or text["hidden_size"]
    if projection != vision["hidden_size"]:
        return (f"SigLIP whose text vectors ({projection} wide) and image vectors ({vision['hidden_size']} wide) "
                "differ in width is not supported")
    return None


def read_siglip(model_dir: Path, hf_config: dict) -> tuple[ClipModel, bool]:
    """The checkpoint's dual-encoder description, and whether its texts are lowercased before tokenizing;
    ClipError where its config, tokenizer or image processor cannot be followed exactly."""
    if refusal := siglip_refusal(hf_config):
        raise ClipError(refusal)
    vision = vision_tower(hf_config)
    image_size, patch_size = vision["image_size"], vision["patch_size"]
    image = read_tower_image_processor(model_dir, image_size)
    tok_cfg = read_json_object(model_dir / "tokenizer_config.json") or {}
    tokenizer_class = tok_cfg.get("tokenizer_class")
    # Read here, whatever the padding, so that what its texts' tokenizer cannot follow is refused at load.
    siglip_tokenizer = read_siglip_tokenizer(model_dir, tok_cfg) if tokenizer_class == SIGLIP_TOKENIZER_CLASS else None
    padding = _text_padding(model_dir, tok_cfg, tokenizer_class, siglip_tokenizer)
    clip = ClipModel(projection_dim=vision["hidden_size"], end_token=None, image_size=image_size,
                     patch_size=patch_size, image=image, class_token=False, text_padding=padding,
                     siglip_tokenizer=siglip_tokenizer is not None)
    return clip, tokenizer_class in LOWERCASING_TOKENIZERS


def _text_padding(model_dir: Path, tok_cfg: dict, tokenizer_class,
                  siglip_tokenizer: SiglipTokenizerFiles | None) -> TextPadding | None:
    """The padding a text carries into the tower (module docstring), None where it carries none."""
    if siglip_tokenizer is None and not (model_dir / "tokenizer.json").is_file():
        raise ClipError(f"a SigLIP checkpoint with tokenizer_class {tokenizer_class!r} and no tokenizer.json is not "
                        f"supported (SiglipTokenizer's spiece.model, or a tokenizer.json, is read)")
    if tokenizer_class not in _TOKENIZER_PADDING_SIDES:
        raise ClipError(f"a SigLIP checkpoint with tokenizer_class {tokenizer_class!r} is not supported "
                        f"(supported: {', '.join(_TOKENIZER_PADDING_SIDES)})")
    side = tok_cfg.get("padding_side", _TOKENIZER_PADDING_SIDES[tokenizer_class])
    if side not in ("left", "right"):
        raise ClipError(f"tokenizer_config.json padding_side {side!r} is neither left nor right")
    masked = "attention_mask" in tok_cfg.get("model_input_names", ("input_ids", "attention_mask"))
    if masked and side == "left":
        return None
    if masked:
        raise ClipError("a SigLIP tokenizer that pads on the right and returns an attention mask is not supported: "
                        "transformers then reads the vector at a padding token that attends to the text but is "
                        "attended to by nothing, which packed attention cannot compute")
    return TextPadding(siglip_tokenizer.pad_id if siglip_tokenizer else _pad_id(model_dir, tok_cfg), side)


def _pad_id(model_dir: Path, tok_cfg: dict) -> int:
    pad = tok_cfg.get("pad_token")
    if isinstance(pad, dict):
        pad = pad.get("content")
    pad_id = read_tokenizer(model_dir / "tokenizer.json").token_to_id(pad) if isinstance(pad, str) else None
    if pad_id is None:
        raise ClipError(f"the tokenizer's pad_token {pad!r} is not in tokenizer.json: SigLIP's texts are padded with it")
    return pad_id
