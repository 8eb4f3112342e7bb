"""An image input as a client sends it (a `data:` URI, or the file an http(s) URL held, which the front end
fetches: server/pipeline/image_fetch.py) -> a decoded Pillow image, within limits.

The front end decodes: the engine never sees bytes of a file. What a client may send is bounded
before any pixel is decoded: the URI's length, the formats (PNG, JPEG, WebP: what OpenAI's and
vLLM's image inputs take), and the pixel count read from the header, so that a small file that
inflates to a huge image (a decompression bomb) is refused before it costs memory. Every refusal is
an ImageInputError saying why, which the route turns into a 400 naming the input.
"""

from __future__ import annotations

import base64
import binascii
import io
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from PIL import Image

# Pillow's format names -> the media types a data: URI may declare for them.
FORMATS = {"PNG": ("image/png",), "JPEG": ("image/jpeg", "image/jpg"), "WEBP": ("image/webp",)}


class ImageInputError(ValueError):
    """An image input that cannot be used, and why (said to the client)."""


@dataclass(frozen=True)
class ImageLimits:
    max_bytes: int = 20 * 1024 * 1024  # an image file, decoded from base64
    max_pixels: int = 50_000_000  # width x height as its header says, before decoding
    max_images: int = 256  # images in one request (its texts are counted as any request's)


def decode_data_uri(url: str, limits: ImageLimits) -> bytes:
    """The file inside a `data:image/...;base64,` URI."""
    if not url.startswith("data:"):
        scheme = url.split(":", 1)[0] if ":" in url else "no scheme"
        raise ImageInputError(f"an image is a data: URI (base64) or an http(s) URL; URLs of {scheme!r} are not "
                              "fetched")
    header, sep, payload = url[5:].partition(",")
    if not sep:
        raise ImageInputError("the data: URI has no ',' between its media type and its data")
    media_type, *params = header.split(";")
    allowed = [t for types in FORMATS.values() for t in types]
    if media_type.lower() not in allowed:
        raise ImageInputError(f"media type {media_type or 'none'!r} is not supported (supported: {', '.join(allowed)})")
    if "base64" not in params:
        raise ImageInputError("the data: URI must be base64 (data:image/png;base64,...)")
    if len(payload) > 4 * (limits.max_bytes // 3 + 1):
        raise ImageInputError(f"the image is larger than {limits.max_bytes} bytes")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise ImageInputError("the data: URI's data is not valid base64") from None
    if len(data) > limits.max_bytes:
        raise ImageInputError(f"the image is larger than {limits.max_bytes} bytes")
    return data


def open_image(data: bytes, limits: ImageLimits) -> Image.Image:
    """The file decoded, in one of FORMATS and within `limits.max_pixels`."""
    from PIL import Image, UnidentifiedImageError

    try:
        image = Image.open(io.BytesIO(data), formats=list(FORMATS))
    except UnidentifiedImageError:
        raise ImageInputError(f"the data is not an image in a supported format ({', '.join(FORMATS)})") from None
    except (OSError, ValueError, Image.DecompressionBombError) as exc:
        raise ImageInputError(f"the image cannot be read ({exc})") from None
    width, height = image.size
    if width * height > limits.max_pixels:
        raise ImageInputError(f"the image has {width}x{height} pixels, more than {limits.max_pixels}")
    try:
        image.load()
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise ImageInputError(f"the image is damaged or cut short ({exc})") from None
    return image
