"""A CLIP model served by a real server (engine process, two front ends, arenas made by the supervisor
for its images) beside a text-only embedder: texts and images from several clients at once, each
request's vectors equal to transformers' get_text_features / get_image_features within 1e-4 and in its
order; an image sent to the text-only model is a 400 naming it; image URLs on the loopback address
(--allow-private-image-urls) fetched by either front end, and Cohere's SDK and Infinity's body sending
images. tests/api/test_clip_api.py, test_clip_urls_api.py and test_clip_dialects_api.py cover the rest
of the routes in process."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import io

import httpx
import numpy as np
import pytest

from tests.conftest import ServerProcess
from tests.support.client_support import checked_server
from tests.support.clip_checkpoints import save_clip
from tests.support.clip_inputs import (IMAGE_TOKENS, TEXTS, image_item, reference_images, reference_texts,
                                       sample_images)
from tests.support.helpers import MODEL
from tests.support.image_server import image_server

pytestmark = pytest.mark.slow  # a real server process

CLIP = "tiny-clip"


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    path = tmp_path_factory.mktemp("clip") / "clip"
    return path, save_clip(path)


@pytest.fixture(scope="module")
def server(saved) -> Iterator[ServerProcess]:
    yield from checked_server("--dtype", "float32", "--model", MODEL, "--model", f"{CLIP}={saved[0]}",
                              "--frontend-workers", "2", "--max-batch-tokens", "512",
                              "--allow-private-image-urls")


def test_texts_and_images_from_several_clients_at_once(server, saved):
    images = sample_images()
    image_rows, text_rows = reference_images(saved, images), reference_texts(saved, TEXTS)
    # Large enough that a request's parts and pieces are several, and batches mix requests.
    items = [item for i in range(30) for item in (TEXTS[i % len(TEXTS)], image_item(images[i % len(images)]))]
    expected = np.stack([row for i in range(30) for row in (text_rows[i % len(TEXTS)], image_rows[i % len(images)])])

    def send(k: int) -> int:
        lo = k % 7
        r = httpx.post(server.url + "/v1/embeddings", json={"input": items[lo:], "model": CLIP}, timeout=120)
        assert r.status_code == 200, r.text
        ours = np.array([row["embedding"] for row in r.json()["data"]], dtype=np.float32)
        np.testing.assert_allclose(ours, expected[lo:], atol=1e-4, rtol=0)
        return r.json()["usage"]["prompt_tokens"]

    with ThreadPoolExecutor(6) as pool:
        used = list(pool.map(send, range(12)))
    assert used[0] >= 30 * IMAGE_TOKENS  # the first request holds every image; each counts its patches + 1


def test_an_image_for_the_text_only_model_is_a_400_naming_it(server):
    body = {"input": ["a", image_item(sample_images()[0])], "model": MODEL}
    r = httpx.post(server.url + "/v1/embeddings", json=body, timeout=60)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "model_takes_texts_only" and MODEL in r.json()["error"]["message"]


def test_image_urls_cohere_sdk_and_infinity_body(server, saved):
    """Several requests, so that both front ends fetch; each answer equal to transformers' vectors."""
    import cohere

    images = sample_images()
    files = {}
    for i, image in enumerate(images):
        out = io.BytesIO()
        image.save(out, format="PNG")
        files[f"/{i}.png"] = ("image/png", out.getvalue())
    expected = reference_images(saved, images)
    with image_server(files) as web:
        urls = [web.url(path) for path in files]
        for _ in range(4):
            r = httpx.post(server.url + "/v1/embeddings", timeout=60, json={
                "model": CLIP, "input": [{"type": "image_url", "image_url": {"url": url}} for url in urls]})
            assert r.status_code == 200, r.text
            ours = np.array([row["embedding"] for row in r.json()["data"]], dtype=np.float32)
            np.testing.assert_allclose(ours, expected, atol=1e-4, rtol=0)
        r = httpx.post(server.url + "/embeddings_image", json={"model": CLIP, "input": urls}, timeout=60)
        assert r.status_code == 200, r.text
        ours = np.array([row["embedding"] for row in r.json()["data"]], dtype=np.float32)
        np.testing.assert_allclose(ours, expected, atol=1e-4, rtol=0)
        answer = cohere.ClientV2(base_url=server.url, api_key="unused").embed(
            model=CLIP, images=urls, input_type="image", embedding_types=["float"])
        np.testing.assert_allclose(np.array(answer.embeddings.float_, dtype=np.float32), expected, atol=1e-4, rtol=0)
