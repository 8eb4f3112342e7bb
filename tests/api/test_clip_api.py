"""A CLIP model on the in-process app with a real CPU engine in float32, through the server's whole path
(front end -> arena -> queue -> engine -> answer): texts on /v1/embeddings are transformers'
get_text_features, images (data: URIs) its get_image_features on the pixels of its own PIL image processor,
both normalised, within 1e-4; texts and images mixed in one request keep their order; `usage` counts an
image as its patches + 1 tokens; a bad image is a 400 naming its index and why."""

from __future__ import annotations

import base64
import io
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from PIL import Image

from rose_embed.engine.contract.config import EngineConfig
from rose_embed.engine.rose.engine import Engine
from tests.support.clip_inputs import (IMAGE_TOKENS, TEXTS, data_uri, image_item, reference_images, reference_texts,
                                       sample_images)
from tests.support.fake_engine import FakeEngine, serve

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def client(clip_saved):
    engine = Engine(EngineConfig(model=str(clip_saved[0]), device="cpu", dtype="float32"))
    with serve(engine) as client:
        yield client


def vectors(response) -> np.ndarray:
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    assert [row["index"] for row in data] == list(range(len(data)))
    return np.array([row["embedding"] for row in data], dtype=np.float32)


def test_texts_equal_transformers(client, clip_saved):
    response = client.post("/v1/embeddings", json={"input": TEXTS, "model": clip_saved[0].name})
    np.testing.assert_allclose(vectors(response), reference_texts(clip_saved, TEXTS), atol=1e-4, rtol=0)


@pytest.mark.parametrize("fmt", ["PNG", "WEBP"])
def test_images_equal_transformers_and_count_their_patches(client, clip_saved, fmt):
    images = sample_images()
    response = client.post("/v1/embeddings", json={"input": [image_item(im, fmt) for im in images],
                                                   "model": clip_saved[0].name})
    np.testing.assert_allclose(vectors(response), reference_images(clip_saved, images), atol=1e-4, rtol=0)
    assert response.json()["usage"] == {"prompt_tokens": len(images) * IMAGE_TOKENS,
                                        "total_tokens": len(images) * IMAGE_TOKENS}


def test_a_jpeg_and_a_lone_image_item(client, clip_saved):
    """A JPEG is compared with the reference on the same decoded image; `input` may be one image item."""
    image = sample_images()[0]
    raw = io.BytesIO()
    image.save(raw, format="JPEG", quality=90)
    decoded = Image.open(io.BytesIO(raw.getvalue()))
    url = "data:image/jpeg;base64," + base64.b64encode(raw.getvalue()).decode()
    response = client.post("/v1/embeddings", json={"input": {"type": "image_url", "image_url": {"url": url}},
                                                   "model": clip_saved[0].name})
    np.testing.assert_allclose(vectors(response), reference_images(clip_saved, [decoded]), atol=1e-4, rtol=0)
    # The bare string form of image_url names the same image.
    response = client.post("/v1/embeddings", json={"input": [{"type": "image_url", "image_url": url}],
                                                   "model": clip_saved[0].name})
    np.testing.assert_allclose(vectors(response), reference_images(clip_saved, [decoded]), atol=1e-4, rtol=0)


def test_texts_and_images_mixed_keep_their_order(client, clip_saved):
    images, texts = sample_images()[:3], TEXTS[:3]
    items = [texts[0], image_item(images[0]), image_item(images[1]), texts[1], texts[2], image_item(images[2])]
    response = client.post("/v1/embeddings", json={"input": items, "model": clip_saved[0].name})
    ours = vectors(response)
    text_rows, image_rows = reference_texts(clip_saved, texts), reference_images(clip_saved, images)
    expected = np.stack([text_rows[0], image_rows[0], image_rows[1], text_rows[1], text_rows[2], image_rows[2]])
    np.testing.assert_allclose(ours, expected, atol=1e-4, rtol=0)
    texts_alone = client.post("/v1/embeddings", json={"input": texts, "model": clip_saved[0].name}).json()["usage"]
    assert response.json()["usage"]["prompt_tokens"] == texts_alone["prompt_tokens"] + 3 * IMAGE_TOKENS


def test_base64_format_holds_the_float_vectors(client, clip_saved):
    items = [TEXTS[0], image_item(sample_images()[1])]
    floats = vectors(client.post("/v1/embeddings", json={"input": items, "model": clip_saved[0].name}))
    response = client.post("/v1/embeddings", json={"input": items, "model": clip_saved[0].name,
                                                   "encoding_format": "base64"})
    assert response.status_code == 200, response.text
    decoded = np.stack([np.frombuffer(base64.b64decode(row["embedding"]), dtype="<f4")
                        for row in response.json()["data"]])
    np.testing.assert_array_equal(decoded, floats)


def _truncated_png() -> str:
    uri = data_uri(sample_images()[0])
    raw = base64.b64decode(uri.split(",", 1)[1])
    return "data:image/png;base64," + base64.b64encode(raw[: len(raw) // 2]).decode()


def _huge_png() -> str:
    """Small as a file, past the 50-megapixel limit as an image (a decompression bomb)."""
    out = io.BytesIO()
    Image.new("1", (8000, 7000)).save(out, format="PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


@pytest.mark.parametrize("url, why", [
    ("data:image/png;base64,AAAA", "not an image in a supported format"),
    ("data:image/png;base64,not base64!", "not valid base64"),
    ("data:image/gif;base64,R0lGODlh", "media type 'image/gif' is not supported"),
    ("ftp://example.com/cat.png", "URLs of 'ftp' are not fetched"),
    ("data:image/png,rawbytes", "must be base64"),
    (_truncated_png(), "damaged or cut short"),
    (_huge_png(), "more than 50000000"),
])
def test_a_bad_image_is_a_400_naming_its_index_and_why(client, clip_saved, url, why):
    items = ["the cat", image_item(sample_images()[0]), {"type": "image_url", "image_url": {"url": url}}]
    response = client.post("/v1/embeddings", json={"input": items, "model": clip_saved[0].name})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "input" and error["code"] == "invalid_image", error
    assert error["message"].startswith("'input[2]' is not a usable image: ") and why in error["message"], error


@pytest.mark.parametrize("item, why", [
    ({"type": "image", "image_url": {"url": "data:image/png;base64,AAAA"}}, "'input[1]' is an object but no image"),
    ({"type": "image_url", "image_url": {"href": "x"}}, "'input[1]' is an object but no image"),
    (7, "'input[1]' must be a string or an image item"),
])
def test_a_malformed_item_is_a_400_naming_its_index(client, clip_saved, item, why):
    items = ["the cat", item, image_item(sample_images()[0])]
    response = client.post("/v1/embeddings", json={"input": items, "model": clip_saved[0].name})
    assert response.status_code == 400, response.text
    assert why in response.json()["error"]["message"]


def test_more_images_than_allowed_are_refused_before_decoding(client, clip_saved):
    from rose_embed.server.pipeline.image_parts import IMAGE_LIMITS

    item = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}  # never decoded
    response = client.post("/v1/embeddings", json={"input": [item] * (IMAGE_LIMITS.max_images + 1),
                                                   "model": clip_saved[0].name})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "too_many_images"


def test_an_image_for_a_text_only_model_names_what_it_serves():
    with serve(FakeEngine(dim=16)) as client:
        response = client.post("/v1/embeddings", json={"input": ["a", image_item(sample_images()[0])]})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "model_takes_texts_only" and "'input[1]' is an image" in error["message"]
    assert "embeds texts only" in error["message"]


def test_images_and_texts_sent_at_once_from_several_threads(client, clip_saved):
    """Requests of images, of texts and of both, in flight together: the queue cuts batches of one kind
    from them and every vector lands in its own request's place."""
    images = sample_images()
    image_rows, text_rows = reference_images(clip_saved, images), reference_texts(clip_saved, TEXTS)
    asks = []
    for k in range(12):
        kind = k % 3
        if kind == 0:
            picks = [(k + j) % len(images) for j in range(3)]
            asks.append(([image_item(images[i]) for i in picks], image_rows[picks]))
        elif kind == 1:
            picks = [(k + j) % len(TEXTS) for j in range(2)]
            asks.append(([TEXTS[i] for i in picks], text_rows[picks]))
        else:
            i, t = k % len(images), k % len(TEXTS)
            asks.append(([image_item(images[i]), TEXTS[t]], np.stack([image_rows[i], text_rows[t]])))

    def send(ask):
        items, expected = ask
        response = client.post("/v1/embeddings", json={"input": items, "model": clip_saved[0].name})
        np.testing.assert_allclose(vectors(response), expected, atol=1e-4, rtol=0)
        return True

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(send, asks))


def test_the_openai_sdk_sends_an_image_item(client, clip_saved):
    """The SDK passes `input` as given (its type hints say texts and ids only) and decodes its default
    base64 answer."""
    import openai

    from tests.support.fake_engine import BASE_URL

    sdk = openai.OpenAI(base_url=BASE_URL + "/v1", api_key="unused", http_client=client, max_retries=0)
    image = sample_images()[2]
    answer = sdk.embeddings.create(model=clip_saved[0].name, input=[TEXTS[0], image_item(image)])
    ours = np.array([row.embedding for row in answer.data], dtype=np.float32)
    expected = np.stack([reference_texts(clip_saved, TEXTS[:1])[0], reference_images(clip_saved, [image])[0]])
    np.testing.assert_allclose(ours, expected, atol=1e-4, rtol=0)
    assert answer.usage.prompt_tokens > IMAGE_TOKENS
