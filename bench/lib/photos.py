"""Photo-like images for bench/images.py's HTTP arm: generated, seeded, encoded once as the files a client
would send (JPEG or PNG) and as the data: URI items of /v1/embeddings.

Random noise would make a poor stand-in: it compresses to nothing (a JPEG of noise is several times a
photo's size) and decodes at another speed. These are smooth colour fields with shapes on them, softened,
with a sensor's grain: at 640x480 a JPEG of quality 90 weighs about 70 KB and a PNG about 580 KB, as a
phone's photo scaled for the web and a screenshot do.
"""

from __future__ import annotations

import base64
import io

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

FORMATS = {"jpeg": ("JPEG", {"quality": 90}), "png": ("PNG", {})}


def photo(seed: int, width: int, height: int) -> Image.Image:
    """A photo-like RGB image: a coarse random colour field upsampled, a dozen ellipses and rectangles,
    a blur, then grain."""
    rng = np.random.default_rng(seed)
    image = Image.fromarray(rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)).resize((width, height), Image.BICUBIC)
    draw = ImageDraw.Draw(image)
    for _ in range(12):
        x, y = int(rng.integers(0, width)), int(rng.integers(0, height))
        rx, ry = int(rng.integers(10, width // 4 + 11)), int(rng.integers(10, height // 4 + 11))
        fill = tuple(int(v) for v in rng.integers(0, 256, 3))
        shape = draw.ellipse if rng.random() < 0.5 else draw.rectangle
        shape((x - rx, y - ry, x + rx, y + ry), fill=fill)
    image = image.filter(ImageFilter.GaussianBlur(2))
    grain = rng.normal(0.0, 6.0, (height, width, 3))
    return Image.fromarray(np.clip(np.asarray(image, np.float64) + grain, 0, 255).astype(np.uint8))


def encoded_file(image: Image.Image, image_format: str) -> bytes:
    name, options = FORMATS[image_format]
    buffer = io.BytesIO()
    image.save(buffer, name, **options)
    return buffer.getvalue()


def image_item(data: bytes, image_format: str) -> dict:
    """The /v1/embeddings input item of an image file, as a base64 data: URI."""
    url = f"data:image/{image_format};base64,{base64.b64encode(data).decode('ascii')}"
    return {"type": "image_url", "image_url": {"url": url}}
