"""What the CLIP tests send and compare with: images of several sizes and modes, their data: URIs and
`input` items, and transformers' own vectors for them (get_image_features on the pixels of the saved
checkpoint's PIL image processor, get_text_features), normalised as the server's are."""

from __future__ import annotations

import base64
import io

import numpy as np
import torch
from PIL import Image, ImageDraw

from rose_embed.engine.contract.config import EngineConfig
from rose_embed.engine.rose.engine import Engine
from tests.support.clip_checkpoints import IMAGE_SIZE

PATCH_SIZE = 8  # save_clip's default
IMAGE_TOKENS = (IMAGE_SIZE // PATCH_SIZE) ** 2 + 1  # what an image counts: its patches and the class token
TEXTS = ["the cat", "a photo of the dog", "the dog <|endoftext|> and what follows", "x " * 40]


def sample_images() -> list[Image.Image]:
    """Of several sizes and modes: wider and taller than the crop, smaller than it, with transparency, grey."""
    rng = np.random.default_rng(3)
    return [Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode)
            for shape, mode in [((45, 70, 3), "RGB"), ((90, 33, 3), "RGB"), ((20, 24, 4), "RGBA"), ((32, 32), "L")]]


def data_uri(image: Image.Image, fmt: str = "PNG") -> str:
    out = io.BytesIO()
    image.save(out, format=fmt, **({"lossless": True} if fmt == "WEBP" else {}))
    return f"data:image/{fmt.lower()};base64," + base64.b64encode(out.getvalue()).decode()


def image_item(image: Image.Image, fmt: str = "PNG") -> dict:
    return {"type": "image_url", "image_url": {"url": data_uri(image, fmt)}}


def reference_images(saved, images: list[Image.Image]) -> np.ndarray:
    """`saved`: (the checkpoint's folder, the transformers CLIPModel saved there)."""
    from transformers import CLIPImageProcessorPil

    path, model = saved
    pixels = CLIPImageProcessorPil.from_pretrained(str(path))(images=images, return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        vectors = model.get_image_features(pixel_values=pixels).pooler_output
    return torch.nn.functional.normalize(vectors, dim=-1).numpy()


def reference_texts(saved, texts: list[str]) -> np.ndarray:
    from transformers import AutoTokenizer

    path, model = saved
    inputs = AutoTokenizer.from_pretrained(str(path))(texts, padding=True, truncation=True, return_tensors="pt")
    with torch.no_grad():
        return torch.nn.functional.normalize(model.get_text_features(**inputs).pooler_output, dim=-1).numpy()


# Zero-shot labels and the shapes drawn for them; shape_images() adds a noise image and an RGBA one.
SHAPES = {"a red circle": ("ellipse", (220, 30, 30)), "a green square": ("rectangle", (30, 200, 40)),
          "a blue triangle": ("polygon", (30, 40, 220)), "a yellow bar": ("bar", (230, 220, 20))}


def drawn_shape(kind: str, colour: tuple[int, int, int], size: tuple[int, int] = (48, 40)) -> Image.Image:
    image = Image.new("RGB", size, (255, 255, 255))
    draw = ImageDraw.Draw(image)
    width, height = size
    box = (width // 5, height // 5, 4 * width // 5, 4 * height // 5)
    if kind == "polygon":
        draw.polygon([(width // 2, box[1]), (box[0], box[3]), (box[2], box[3])], fill=colour)
    elif kind == "bar":
        draw.rectangle((box[0], height // 2 - 3, box[2], height // 2 + 3), fill=colour)
    else:
        getattr(draw, kind)(box, fill=colour)
    return image


def shape_images() -> list[Image.Image]:
    rng = np.random.default_rng(5)
    drawn = [drawn_shape(kind, colour) for kind, colour in SHAPES.values()]
    return [*drawn, Image.fromarray(rng.integers(0, 256, (70, 33, 3), dtype=np.uint8)),
            Image.fromarray(rng.integers(0, 256, (20, 20, 4), dtype=np.uint8), "RGBA")]


def normalised(vectors: torch.Tensor) -> np.ndarray:
    return torch.nn.functional.normalize(vectors.float(), dim=-1).numpy()


def cpu_float32_engine(path) -> Engine:
    return Engine(EngineConfig(model=str(path), device="cpu", dtype="float32"))
