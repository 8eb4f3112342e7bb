"""Image inputs as data: URIs: decoded to the very image Pillow reads from the file, in PNG, JPEG and WebP;
everything else refused, each with its reason, before its pixels are decoded where the header tells."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from PIL import Image

from rose_embed.engine.image.decode import ImageInputError, ImageLimits, decode_data_uri, open_image

LIMITS = ImageLimits()


def _file(fmt: str, size=(23, 17), mode="RGB") -> bytes:
    rng = np.random.default_rng(0)
    image = Image.fromarray(rng.integers(0, 256, (size[1], size[0], len(mode)), dtype=np.uint8), mode)
    out = io.BytesIO()
    image.save(out, format=fmt)
    return out.getvalue()


def _uri(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


@pytest.mark.parametrize("fmt, media_type", [("PNG", "image/png"), ("JPEG", "image/jpeg"), ("WEBP", "image/webp")])
def test_formats_decode_as_pillow_reads_the_file(fmt, media_type):
    data = _file(fmt)
    image = open_image(decode_data_uri(_uri(data, media_type), LIMITS), LIMITS)
    assert image.format == fmt
    np.testing.assert_array_equal(np.asarray(image), np.asarray(Image.open(io.BytesIO(data))))


def test_rgba_png_keeps_its_alpha():
    image = open_image(decode_data_uri(_uri(_file("PNG", mode="RGBA")), LIMITS), LIMITS)
    assert image.mode == "RGBA"


@pytest.mark.parametrize("url, why", [
    ("ftp://example.com/cat.png", "URLs of 'ftp' are not fetched"),
    ("data:image/png;base64", "no ','"),
    ("data:image/gif;base64,R0lGODlhAQABAAAAACw=", "media type 'image/gif' is not supported"),
    ("data:image/png,abcd", "must be base64"),
    ("data:image/png;base64,not base64!", "not valid base64"),
])
def test_bad_uris_say_why(url, why):
    with pytest.raises(ImageInputError, match=why):
        decode_data_uri(url, LIMITS)


def test_too_many_bytes():
    with pytest.raises(ImageInputError, match="larger than 100 bytes"):
        decode_data_uri(_uri(_file("PNG")), ImageLimits(max_bytes=100))


@pytest.mark.parametrize("data, why", [
    (b"plain text, not an image", "not an image in a supported format"),
    (_file("BMP"), "not an image in a supported format"),
    (_file("PNG", size=(300, 200))[:200], "damaged or cut short"),
])
def test_bad_files_say_why(data, why):
    with pytest.raises(ImageInputError, match=why):
        open_image(data, LIMITS)


def test_too_many_pixels_is_refused_from_the_header():
    with pytest.raises(ImageInputError, match="300x200 pixels, more than 1000"):
        open_image(_file("PNG", size=(300, 200)), ImageLimits(max_pixels=1000))
