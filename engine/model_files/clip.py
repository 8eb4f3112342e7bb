"""CLIP dual encoders: a text tower and a vision tower whose projections share one vector space.

Recognized from a Hugging Face `CLIPModel` save (config.json model_type "clip" with text_config and
vision_config) and from sentence-transformers' packaging of one: modules.json holding a single
module that is either the legacy `CLIPModel` (2.x-5.x: the Hugging Face save in the module's folder,
often "0_CLIPModel") or a `Transformer` whose modality_config maps texts to get_text_features and
images to get_image_features (what 6.x writes, in the model folder itself). A Normalize module may
follow: the server normalises every vector anyway. Anything else is refused by name.

A text's vector is transformers' get_text_features: the text tower's final layer norm at the first
end token (or, for configs whose eos_token_id is the pre-2023 placeholder 2, at the highest id in
the text), through text_projection. Attention is causal, so that token's state depends on nothing
after it: texts are cut after it (engine/text/tokenizer.py) and pooled at their last token. An
image's vector is get_image_features: the vision tower's post_layernorm of the class token, through
visual_projection. Images are preprocessed as the checkpoint's image processor says
(engine/image/preprocess.py reads it here, and refuses what it cannot follow exactly).

Reads JSON only: no torch, so that a front end may ask.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rose_embed.engine.image.preprocess import ImagePreprocess, ImageProcessorError, read_image_processor
from rose_embed.engine.model_files.json_files import read_json, read_json_object

CLIP_MODEL_TYPE = "clip"
# The activations whose definition the engine's CLIP layers compute exactly (engine/rose/models/clip.py).
CLIP_ACTIVATIONS = ("quick_gelu", "gelu", "gelu_new", "gelu_pytorch_tanh", "relu")
# The eos_token_id that configs written before transformers took the tokenizer's real one carry:
# transformers then pools at the highest token id of each text (the end token is CLIP's last id).
LEGACY_EOS_TOKEN_ID = 2
# A text is cut after its first occurrence of its highest id (the legacy configs' end token).
HIGHEST_ID = -1
# CLIPTextConfig's eos_token_id where config.json names none.
DEFAULT_EOS_TOKEN_ID = 49407
_GET_FEATURES = {"text": "get_text_features", "image": "get_image_features"}


class ClipError(ValueError):
    """A CLIP checkpoint, or its packaging, that the engine cannot serve exactly."""


@dataclass(frozen=True)
class TextPadding:
    """Padding ids that a dual encoder's texts carry into the text tower, up to its max_seq_len, because
    the reference's vector depends on them (SigLIP, engine/model_files/siglip.py)."""

    pad_id: int
    side: str  # "left" or "right"


@dataclass(frozen=True)
class ClipModel:
    """What a dual encoder (CLIP, or SigLIP: engine/model_files/siglip.py) computes beyond its layers'
    shapes (config.json keeps those): the description the front ends and the engine share."""

    projection_dim: int  # the width of text and image vectors alike
    end_token: int | None  # where a text's vector is read: its first occurrence of this id, or HIGHEST_ID;
    # None where the text tower is bidirectional and reads the last token of the whole (padded) text
    image_size: int  # the vision tower's input is image_size x image_size pixels
    patch_size: int
    image: ImagePreprocess  # how an image becomes those pixels
    class_token: bool = True  # the vision sequence starts with a class token (CLIP's; SigLIP has none)
    text_padding: TextPadding | None = None
    # Texts are tokenized as transformers' SiglipTokenizer does, from spiece.model (engine/text/siglip_texts.py).
    siglip_tokenizer: bool = False

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    @property
    def image_seq_len(self) -> int:
        """The vision tower's sequence: its patches and any class token; every image has this length."""
        return self.num_patches + int(self.class_token)

    @property
    def pixel_floats_per_token(self) -> int:
        """The floats of pixels [3, S, S] an image carries per token it counts in a batch (rounded up): what
        a batch of images takes in the shared-memory arena besides its token arrays."""
        return -(-3 * self.image_size * self.image_size // self.image_seq_len)


def pixel_floats_per_token(specs) -> int:
    """The most `ClipModel.pixel_floats_per_token` of the served models' specs (0: none embeds images)."""
    return max((spec.clip.pixel_floats_per_token for spec in specs if getattr(spec, "clip", None) is not None),
               default=0)


def is_clip(hf_config: dict) -> bool:
    return hf_config.get("model_type") == CLIP_MODEL_TYPE


def clip_model_dir(root: Path) -> Path | None:
    """The folder that holds the Hugging Face CLIP save, where `root` is sentence-transformers' packaging of
    one; None where `root` has no modules.json or its modules are not a CLIP model's (the caller reads
    `root` as any other model). ClipError for a CLIP packaging whose modules do not run exactly."""
    modules = read_json(root / "modules.json")
    if not isinstance(modules, list) or not modules or not isinstance(modules[0], dict):
        return None
    first = modules[0]
    kind = str(first.get("type", "")).rsplit(".", 1)[-1]
    folder = root / str(first.get("path", ""))
    if kind not in ("CLIPModel", "Transformer") or not is_clip(read_json_object(folder / "config.json") or {}):
        return None
    if kind == "Transformer":
        _check_modality_config(read_json_object(folder / "sentence_bert_config.json") or {})
    for entry in modules[1:]:
        kind = str(entry.get("type", "")).rsplit(".", 1)[-1] if isinstance(entry, dict) else repr(entry)
        if kind != "Normalize":
            raise ClipError(f"sentence-transformers module {kind!r} after a CLIP model is not supported (a CLIP "
                            "model may be followed by Normalize only)")
    return folder


def _check_modality_config(settings: dict) -> None:
    """A 6.x Transformer module over a CLIP model must read get_text_features and get_image_features, as it
    writes by default; another method or output would make other vectors."""
    modalities = settings.get("modality_config")
    if modalities is None:
        return
    if not isinstance(modalities, dict):
        raise ClipError("sentence_bert_config.json modality_config is not a JSON object")
    for modality, how in modalities.items():
        if modality not in _GET_FEATURES:
            raise ClipError(f"sentence_bert_config.json modality {modality!r} is not supported for CLIP "
                            f"(supported: {', '.join(_GET_FEATURES)})")
        method = how.get("method") if isinstance(how, dict) else None
        output = how.get("method_output_name", "pooler_output") if isinstance(how, dict) else None
        if method != _GET_FEATURES[modality] or output not in ("pooler_output", None):
            raise ClipError(f"sentence_bert_config.json reads {modality} vectors from {method}.{output}; only "
                            f"{_GET_FEATURES[modality]}'s pooler_output is supported")
    output_name = settings.get("module_output_name", "sentence_embedding")
    if output_name != "sentence_embedding":
        raise ClipError(f"sentence_bert_config.json module_output_name {output_name!r} is not sentence_embedding")


def clip_refusal(config: dict) -> str | None:
    """Why the engine cannot run this CLIP config.json exactly, or None (engine/model_files/architecture_support.py)."""
    text, vision = config.get("text_config"), config.get("vision_config")
    if not isinstance(text, dict) or not isinstance(vision, dict):
        return "a CLIP config.json needs text_config and vision_config"
    for name, tower in (("text", text), ("vision", vision)):
        act = tower.get("hidden_act", "quick_gelu")
        if act not in CLIP_ACTIVATIONS:
            return f"CLIP with {name}_config hidden_act {act!r} is not supported (supported: {', '.join(CLIP_ACTIVATIONS)})"
    if not isinstance(text.get("eos_token_id", DEFAULT_EOS_TOKEN_ID), int):
        return f"CLIP with text_config eos_token_id {text['eos_token_id']!r} is not supported (one id is)"
    for key in ("image_size", "patch_size"):
        if key in vision and not isinstance(vision[key], int):
            return f"CLIP with vision_config {key} {vision[key]!r} is not supported (square images and patches are)"
    if vision.get("num_channels", 3) != 3:
        return f"CLIP with vision_config num_channels {vision['num_channels']} is not supported (RGB images have 3)"
    return None


def read_tower_image_processor(model_dir: Path, image_size: int):
    """The checkpoint's image processor settings; ClipError where they cannot be followed exactly or make
    images of another size than the vision tower's `image_size`."""
    try:
        image = read_image_processor(model_dir)
    except ImageProcessorError as exc:
        raise ClipError(str(exc)) from exc
    if image.crop_size != (image_size, image_size):
        raise ClipError(f"the image processor makes {image.crop_size[0]}x{image.crop_size[1]} images, but the vision "
                        f"tower takes {image_size}x{image_size} ones")
    return image


def read_clip(model_dir: Path, hf_config: dict) -> ClipModel:
    """The checkpoint's ClipModel; ClipError where its config or image processor cannot be followed exactly."""
    if refusal := clip_refusal(hf_config):
        raise ClipError(refusal)
    text, vision = hf_config["text_config"], hf_config["vision_config"]
    image_size, patch_size = int(vision.get("image_size", 224)), int(vision.get("patch_size", 32))
    image = read_tower_image_processor(model_dir, image_size)
    eos = text.get("eos_token_id", DEFAULT_EOS_TOKEN_ID)
    return ClipModel(
        projection_dim=int(hf_config.get("projection_dim", 512)),
        end_token=HIGHEST_ID if eos == LEGACY_EOS_TOKEN_ID else int(eos),
        image_size=image_size, patch_size=patch_size, image=image,
    )
