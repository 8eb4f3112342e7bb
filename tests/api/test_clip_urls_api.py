"""Image inputs given as http(s) URLs, fetched by the front end from a server on the loopback address in
the test: the vectors equal transformers' on the same files, through redirects too; with the flag off (the
default) a private address is refused before any connection; a body past the limit (declared or streamed),
a fetch past the timeout, a page that is no image and a 404 are each a 400 naming the input and why."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from rose_embed.engine.contract.config import EngineConfig
from rose_embed.engine.rose.engine import Engine
from tests.support.clip_inputs import TEXTS, image_item, reference_images, reference_texts, sample_images
from tests.support.fake_engine import fake_config, serve
from tests.support.image_server import image_server

pytestmark = pytest.mark.slow

TIMEOUT_S = 1.0
BIG_BYTES = 21 * 1024 * 1024  # past the 20 MiB image limit


def _file(image: Image.Image, fmt: str) -> bytes:
    out = io.BytesIO()
    image.save(out, format=fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return out.getvalue()


@pytest.fixture(scope="module")
def files():
    images = sample_images()
    return {"/cat.png": ("image/png", _file(images[0], "PNG")),
            "/dog.jpg": ("image/jpeg", _file(images[1], "JPEG")),
            "/grey.webp": ("application/octet-stream", _file(images[3], "WEBP")),
            "/page.html": ("text/html; charset=utf-8", b"<html>no image here</html>"),
            "/bytes": ("application/octet-stream", b"these bytes are no image")}


@pytest.fixture(scope="module")
def web(files):
    with image_server(files, big_bytes=BIG_BYTES, slow_s=4 * TIMEOUT_S) as server:
        yield server


def _client(clip_saved, **config):
    engine = Engine(EngineConfig(model=str(clip_saved[0]), device="cpu", dtype="float32"))
    return serve(engine, fake_config(**config))


@pytest.fixture(scope="module")
def client(clip_saved):
    """A server that may fetch private addresses (the test's server is on the loopback address)."""
    with _client(clip_saved, allow_private_image_urls=True, image_url_timeout=TIMEOUT_S) as client:
        yield client


def _url(url: str) -> dict:
    return {"type": "image_url", "image_url": {"url": url}}


def _decoded(files, path: str) -> Image.Image:
    return Image.open(io.BytesIO(files[path][1]))


def vectors(response) -> np.ndarray:
    assert response.status_code == 200, response.text
    return np.array([row["embedding"] for row in response.json()["data"]], dtype=np.float32)


def test_fetched_images_equal_transformers_beside_texts_and_data_uris(client, clip_saved, web, files):
    inline = sample_images()[2]
    items = [_url(web.url("/cat.png")), TEXTS[0], image_item(inline), _url(web.url("/dog.jpg")),
             _url(web.url("/grey.webp"))]
    ours = vectors(client.post("/v1/embeddings", json={"input": items, "model": clip_saved[0].name}))
    images = reference_images(clip_saved, [_decoded(files, "/cat.png"), inline, _decoded(files, "/dog.jpg"),
                                      _decoded(files, "/grey.webp")])
    expected = np.stack([images[0], reference_texts(clip_saved, TEXTS[:1])[0], images[1], images[2], images[3]])
    np.testing.assert_allclose(ours, expected, atol=1e-4, rtol=0)


def test_a_redirect_is_followed(client, clip_saved, web, files):
    url = web.url("/redirect?to=" + web.url("/cat.png"))
    ours = vectors(client.post("/v1/embeddings", json={"input": [_url(url)], "model": clip_saved[0].name}))
    np.testing.assert_allclose(ours, reference_images(clip_saved, [_decoded(files, "/cat.png")]), atol=1e-4, rtol=0)


def _refusal(client, clip_saved, url: str) -> str:
    items = ["the cat", image_item(sample_images()[0]), _url(url)]
    response = client.post("/v1/embeddings", json={"input": items, "model": clip_saved[0].name})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "input" and error["code"] == "invalid_image", error
    assert error["message"].startswith("'input[2]' is not a usable image: "), error
    return error["message"]


@pytest.mark.parametrize("path, why", [
    ("/big-declared", f"holds {BIG_BYTES} bytes, more than the image limit of 20971520 bytes"),
    ("/big-streamed", "holds more than the image limit of 20971520 bytes"),
    ("/slow", f"took longer than {TIMEOUT_S:g} s"),
    ("/page.html", "answered content of type 'text/html', not an image"),
    ("/bytes", "not an image in a supported format"),
    ("/missing.png", "answered HTTP 404, not an image"),
])
def test_a_url_that_gives_no_usable_image_is_a_400_naming_its_index_and_why(client, clip_saved, web, path, why):
    assert why in _refusal(client, clip_saved, web.url(path))


def test_a_url_of_a_host_that_does_not_resolve_is_a_400(client, clip_saved):
    assert "cannot be fetched" in _refusal(client, clip_saved, "http://no-such-host.invalid/cat.png")


def test_private_addresses_are_refused_by_default(clip_saved, web):
    """Without --allow-private-image-urls: the loopback address, by number or by name, and a redirect to it."""
    with _client(clip_saved) as client:
        for url in [web.url("/cat.png"), web.url("/cat.png", host="localhost"), "http://[::1]:9/cat.png",
                    "http://10.0.0.1/cat.png", "http://169.254.169.254/latest/meta-data"]:
            message = _refusal(client, clip_saved, url)
            assert "is not a public address" in message and "--allow-private-image-urls" in message, message
