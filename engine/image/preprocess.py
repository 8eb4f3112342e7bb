"""An image -> the pixels [3, H, W] float32 a vision tower takes, as the checkpoint's image processor makes them.

Follows transformers' CLIP image processor step by step, with Pillow as its PIL backend does
(CLIPImageProcessorPil; transformers 4.x's CLIPImageProcessor was the same code): to RGB (transparency
composited onto white), the shortest edge resized to `size` with the config's resample filter (the long
edge to int(size * long / short)), a center crop (zero-padded where the image is smaller), the rescale
(float64, then float32) and the normalisation (float32). The pixels are the reference's, bit for bit
(tests/models/test_clip_models.py). transformers' torchvision backend resizes with a bicubic kernel of
its own, whose pixels differ from Pillow's by a few levels: a checkpoint is served as its PIL processor
reads it.

SigLIP's image processor (SiglipImageProcessorPil, the same PIL backend) is these steps without the
crop: the image resized to size's height and width whatever its aspect ratio, rescaled and normalised
with mean and std 0.5; its class defaults (bicubic, 224x224) differ from CLIP's and are kept apart.

Read from preprocessor_config.json, or from processor_config.json's image_processor (what
transformers 5 writes); a setting this cannot follow exactly is refused by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from rose_embed.engine.model_files.json_files import read_json_object

if TYPE_CHECKING:
    from PIL import Image

# The image processor classes whose steps are the ones below (their names across transformers versions),
# each with its class's defaults for the settings a config may leave out.
_CLIP_DEFAULTS = {"size": {"shortest_edge": 224}, "do_center_crop": True, "crop_size": {"height": 224, "width": 224},
                  "resample": 3, "image_mean": (0.48145466, 0.4578275, 0.40821073),
                  "image_std": (0.26862954, 0.26130258, 0.27577711)}
_SIGLIP_DEFAULTS = {"size": {"height": 224, "width": 224}, "do_center_crop": False, "resample": 3,
                    "image_mean": (0.5, 0.5, 0.5), "image_std": (0.5, 0.5, 0.5)}
_PROCESSOR_DEFAULTS = {
    **dict.fromkeys(("CLIPImageProcessor", "CLIPImageProcessorFast", "CLIPImageProcessorPil", "CLIPFeatureExtractor"),
                    _CLIP_DEFAULTS),
    **dict.fromkeys(("SiglipImageProcessor", "SiglipImageProcessorFast", "SiglipImageProcessorPil"), _SIGLIP_DEFAULTS),
}
_PROCESSOR_TYPES = tuple(_PROCESSOR_DEFAULTS)
# Pillow's resampling filters, by the numbers configs store (PILImageResampling).
_RESAMPLE_FILTERS = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}
# Keys that change nothing the steps below compute (bookkeeping, or settings of steps left out).
_IGNORED_KEYS = {"image_processor_type", "feature_extractor_type", "processor_class", "image_seq_length",
                 "default_to_square", "data_format", "input_data_format", "return_tensors", "device",
                 "disable_grouping", "do_pad", "pad_size"}
_KNOWN_KEYS = {"do_resize", "size", "resample", "do_center_crop", "crop_size", "do_rescale", "rescale_factor",
               "do_normalize", "image_mean", "image_std", "do_convert_rgb", "use_square_size"}


class ImageProcessorError(ValueError):
    """An image processor config that the front end cannot follow exactly."""


@dataclass(frozen=True)
class ImagePreprocess:
    shortest_edge: int | None  # resize the shortest edge to this; None with `resize_to` or no resize
    resize_to: tuple[int, int] | None  # resize to (height, width) whatever the aspect ratio
    resample: int  # Pillow's filter number
    crop_size: tuple[int, int]  # (height, width) of the pixels handed out
    do_center_crop: bool
    rescale_factor: float | None
    mean: tuple[float, ...] | None  # None: no normalisation
    std: tuple[float, ...] | None


def read_image_processor(model_dir: Path) -> ImagePreprocess:
    """The model's image preprocessing; ImageProcessorError where it has none or one not followed exactly."""
    config = read_json_object(model_dir / "preprocessor_config.json")
    if config is None:
        processor = read_json_object(model_dir / "processor_config.json") or {}
        config = processor.get("image_processor")
    if not isinstance(config, dict):
        raise ImageProcessorError(f"{model_dir} has no image processor (preprocessor_config.json, or "
                                  "processor_config.json's image_processor)")
    return image_preprocess(config)


def image_preprocess(config: dict) -> ImagePreprocess:
    """ImagePreprocess from an image processor's settings, with its class's defaults (CLIPImageProcessor's
    where it names none). A setting saved as null takes the class's default, as transformers reads it."""
    kind = config.get("image_processor_type", config.get("feature_extractor_type"))
    if kind is not None and kind not in _PROCESSOR_TYPES:
        raise ImageProcessorError(f"image processor {kind!r} is not supported (supported: {', '.join(_PROCESSOR_TYPES)})")
    unknown = sorted(set(config) - _KNOWN_KEYS - _IGNORED_KEYS)
    if unknown:
        raise ImageProcessorError(f"image processor settings {', '.join(unknown)} are not supported")
    config = {**_PROCESSOR_DEFAULTS[kind or "CLIPImageProcessor"],
              **{key: value for key, value in config.items() if value is not None}}
    if config.get("do_convert_rgb", True) is not True:
        raise ImageProcessorError("an image processor with do_convert_rgb false is not supported")
    if config.get("use_square_size"):
        raise ImageProcessorError("an image processor with use_square_size is not supported")
    resample = config["resample"]
    if resample not in _RESAMPLE_FILTERS:
        raise ImageProcessorError(f"image processor resample {resample!r} is not one of Pillow's filters")
    shortest_edge = resize_to = None
    if config.get("do_resize", True):
        shortest_edge, resize_to = _resize(config["size"])
    do_center_crop = bool(config["do_center_crop"])
    if do_center_crop:
        crop_size = _crop(config.get("crop_size", {"height": 224, "width": 224}))
    elif resize_to is not None:
        crop_size = resize_to
    else:
        raise ImageProcessorError("an image processor that neither crops nor resizes to one size gives images of "
                                  "many sizes; a vision tower takes one")
    mean = std = None
    if config.get("do_normalize", True):
        mean, std = (_channels(config[key], key) for key in ("image_mean", "image_std"))
    rescale = float(config.get("rescale_factor", 1 / 255)) if config.get("do_rescale", True) else None
    return ImagePreprocess(shortest_edge, resize_to, int(resample), crop_size, do_center_crop, rescale, mean, std)


def _resize(size) -> tuple[int | None, tuple[int, int] | None]:
    if isinstance(size, int):  # the oldest configs: the shortest edge
        return size, None
    if isinstance(size, dict) and set(size) == {"shortest_edge"}:
        return int(size["shortest_edge"]), None
    if isinstance(size, dict) and set(size) == {"height", "width"}:
        return None, (int(size["height"]), int(size["width"]))
    raise ImageProcessorError(f"image processor size {size!r} is not supported (shortest_edge, or height and width)")


def _crop(size) -> tuple[int, int]:
    if isinstance(size, int):
        return size, size
    if isinstance(size, dict) and set(size) == {"height", "width"}:
        return int(size["height"]), int(size["width"])
    raise ImageProcessorError(f"image processor crop_size {size!r} is not supported (height and width)")


def _channels(values, key: str) -> tuple[float, ...]:
    if isinstance(values, (int, float)):
        values = [values] * 3
    if not isinstance(values, (list, tuple)) or len(values) != 3:
        raise ImageProcessorError(f"image processor {key} {values!r} is not one number per RGB channel")
    return tuple(float(v) for v in values)


def to_rgb(image: Image.Image) -> Image.Image:
    """RGB, with any transparency composited onto white (transformers' convert_to_rgb)."""
    from PIL import Image

    if "A" in image.getbands() or image.info.get("transparency") is not None:
        image = image.convert("RGBA")
        return Image.alpha_composite(Image.new("RGBA", image.size, (255, 255, 255, 255)), image).convert("RGB")
    return image.convert("RGB")


def preprocess(image: Image.Image, how: ImagePreprocess) -> np.ndarray:
    """The image as the vision tower's pixels [3, crop height, crop width] float32."""
    image = to_rgb(image)
    if how.shortest_edge is not None:
        width, height = image.size
        short, long = (width, height) if width <= height else (height, width)
        new_short, new_long = how.shortest_edge, int(how.shortest_edge * long / short)
        height, width = (new_long, new_short) if width <= height else (new_short, new_long)
        image = image.resize((width, height), resample=how.resample)
    elif how.resize_to is not None:
        image = image.resize(how.resize_to[::-1], resample=how.resample)
    pixels = np.moveaxis(np.asarray(image), -1, 0)  # [3, H, W] uint8
    if how.do_center_crop:
        pixels = _center_crop(pixels, *how.crop_size)
    if how.rescale_factor is not None:
        pixels = (pixels.astype(np.float64) * how.rescale_factor).astype(np.float32)
    else:
        pixels = pixels.astype(np.float32)
    if how.mean is not None:
        mean, std = np.array(how.mean, dtype=np.float32), np.array(how.std, dtype=np.float32)
        pixels = ((pixels.T - mean) / std).T
    return np.ascontiguousarray(pixels, dtype=np.float32)


def _center_crop(pixels: np.ndarray, crop_height: int, crop_width: int) -> np.ndarray:
    """transformers' center_crop: the middle (rounding up and left), zero-padded where the image is smaller."""
    _, height, width = pixels.shape
    top, left = (height - crop_height) // 2, (width - crop_width) // 2
    if top >= 0 and left >= 0:
        return pixels[:, top: top + crop_height, left: left + crop_width]
    new_height, new_width = max(crop_height, height), max(crop_width, width)
    padded = np.zeros((pixels.shape[0], new_height, new_width), dtype=pixels.dtype)
    top_pad, left_pad = -(-(new_height - height) // 2), -(-(new_width - width) // 2)
    padded[:, top_pad: top_pad + height, left_pad: left_pad + width] = pixels
    top, left = top + top_pad, left + left_pad
    return padded[:, max(0, top): min(new_height, top + crop_height), max(0, left): min(new_width, left + crop_width)]
