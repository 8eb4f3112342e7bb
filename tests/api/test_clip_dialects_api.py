"""A CLIP model's images through Cohere's /v2/embed (`images`, and `inputs` with `image_url` parts) and
Infinity's /embeddings_image and /embeddings body (`modality: "image"`), on the in-process app with a real
CPU engine in float32: the vectors equal transformers' (and so /v1/embeddings'), within 1e-4; Cohere's SDK
sends its images unchanged; what a route cannot take is a 400 naming its field and index. Image URLs are
fetched from a server in the test."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from PIL import Image

from rose_embed.engine.contract.config import EngineConfig
from rose_embed.engine.rose.engine import Engine
from tests.support.clip_inputs import (IMAGE_TOKENS, TEXTS, data_uri, image_item, reference_images, reference_texts,
                                       sample_images)
from tests.support.fake_engine import BASE_URL, FakeEngine, fake_config, serve
from tests.support.helpers import assert_envelope
from tests.support.image_server import image_server

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def client(clip_saved):
    engine = Engine(EngineConfig(model=str(clip_saved[0]), device="cpu", dtype="float32"))
    with serve(engine, fake_config(allow_private_image_urls=True)) as client:
        yield client


@pytest.fixture(scope="module")
def web():
    out = io.BytesIO()
    sample_images()[1].save(out, format="PNG")
    with image_server({"/dog.png": ("image/png", out.getvalue())}) as server:
        yield server


def _floats(rows) -> np.ndarray:
    return np.array(rows, dtype=np.float32)


# Cohere's /v2/embed

def test_cohere_images_equal_transformers_and_the_openai_route(client, clip_saved, web):
    images = sample_images()
    uris = [data_uri(image) for image in images[:1]] + [web.url("/dog.png")] + [data_uri(im) for im in images[2:]]
    response = client.post("/v2/embed", json={"model": clip_saved[0].name, "images": uris, "input_type": "image",
                                              "embedding_types": ["float"]})
    assert response.status_code == 200, response.text
    body = response.json()
    ours = _floats(body["embeddings"]["float"])
    np.testing.assert_allclose(ours, reference_images(clip_saved, images), atol=1e-4, rtol=0)
    assert body["texts"] == [] and body["meta"]["billed_units"]["input_tokens"] == len(images) * IMAGE_TOKENS
    openai = client.post("/v1/embeddings", json={"model": clip_saved[0].name, "input": [image_item(im) for im in images]})
    np.testing.assert_allclose(ours, _floats([row["embedding"] for row in openai.json()["data"]]), atol=1e-6, rtol=0)


def test_cohere_inputs_of_texts_and_image_parts_keep_their_order(client, clip_saved):
    images = sample_images()[:2]
    inputs = [{"content": [{"type": "image_url", "image_url": {"url": data_uri(images[0])}}]},
              {"content": [{"type": "text", "text": TEXTS[0]}]},
              {"content": [{"type": "image_url", "image_url": data_uri(images[1])}]},  # the URL as a bare string
              {"content": [{"type": "text", "text": TEXTS[1]}]}]
    response = client.post("/v2/embed", json={"model": clip_saved[0].name, "inputs": inputs, "input_type": "search_query",
                                              "embedding_types": ["float", "base64"]})
    assert response.status_code == 200, response.text
    body = response.json()
    image_rows, text_rows = reference_images(clip_saved, images), reference_texts(clip_saved, TEXTS[:2])
    expected = np.stack([image_rows[0], text_rows[0], image_rows[1], text_rows[1]])
    ours = _floats(body["embeddings"]["float"])
    np.testing.assert_allclose(ours, expected, atol=1e-4, rtol=0)
    decoded = np.stack([np.frombuffer(base64.b64decode(row), dtype="<f4") for row in body["embeddings"]["base64"]])
    np.testing.assert_array_equal(decoded, ours)
    assert body["texts"] == TEXTS[:2]


def test_cohere_sdk_embeds_images_unchanged(client, clip_saved):
    import cohere

    images = sample_images()[:3]
    sdk = cohere.ClientV2(base_url=BASE_URL, api_key="unused", httpx_client=client)
    answer = sdk.embed(model=clip_saved[0].name, images=[data_uri(image) for image in images], input_type="image",
                       embedding_types=["float"])
    np.testing.assert_allclose(_floats(answer.embeddings.float_), reference_images(clip_saved, images), atol=1e-4, rtol=0)
    answer = sdk.embed(model=clip_saved[0].name, input_type="image", embedding_types=["float"], inputs=[
        {"content": [{"type": "image_url", "image_url": {"url": data_uri(images[0])}}]},
        {"content": [{"type": "text", "text": TEXTS[0]}]}])
    expected = np.stack([reference_images(clip_saved, images[:1])[0], reference_texts(clip_saved, TEXTS[:1])[0]])
    np.testing.assert_allclose(_floats(answer.embeddings.float_), expected, atol=1e-4, rtol=0)


def test_cohere_v1_embed_takes_images_too(client, clip_saved):
    image = sample_images()[3]
    response = client.post("/v1/embed", json={"model": clip_saved[0].name, "images": [data_uri(image)],
                                              "input_type": "image"})
    assert response.status_code == 200, response.text
    assert response.json()["response_type"] == "embeddings_floats"
    np.testing.assert_allclose(_floats(response.json()["embeddings"]), reference_images(clip_saved, [image]), atol=1e-4,
                               rtol=0)


def test_the_body_llamaindex_cohere_embedding_sends_for_an_image(client, clip_saved):
    """Exactly what its get_image_embedding posts for a .jpg file (tests/clients/test_client_images.py sends it
    through the class where the class is installed): Cohere's model name, which the first model answers,
    `truncate`, and the file's suffix as its media type."""
    out = io.BytesIO()
    sample_images()[1].save(out, format="JPEG")
    uri = "data:image/jpg;base64," + base64.b64encode(out.getvalue()).decode()
    response = client.post("/v2/embed", json={
        "model": "embed-english-v3.0", "input_type": "image", "embedding_types": ["float"], "truncate": "END",
        "inputs": [{"content": [{"type": "image_url", "image_url": {"url": uri}}]}]})
    assert response.status_code == 200, response.text
    expected = reference_images(clip_saved, [Image.open(io.BytesIO(out.getvalue()))])
    np.testing.assert_allclose(_floats(response.json()["embeddings"]["float"]), expected, atol=1e-4, rtol=0)


@pytest.mark.parametrize("body, param, why", [
    ({"images": ["data:image/png;base64,AAAA"]}, "images", "'images[0]' is not a usable image"),
    ({"images": [7]}, "images", None),
    ({"images": []}, "images", "must not be an empty array"),
    ({"images": ["data:image/png;base64,AAAA"], "texts": ["a"]}, "images", "not in texts and images"),
    ({"inputs": [{"content": [{"type": "text", "text": "a"}]},
                 {"content": [{"type": "image_url", "image_url": {"url": "ftp://x/cat.png"}}]}]}, "inputs",
     "'inputs[1]' is not a usable image: an image is a data: URI (base64) or an http(s) URL"),
    ({"inputs": [{"content": [{"type": "text", "text": "a"},
                              {"type": "image_url", "image_url": {"url": "data:,"}}]}]}, "inputs",
     "'inputs[0]' must hold exactly one part"),
    ({"inputs": [{"content": [{"type": "image_url", "image_url": {"href": "x"}}]}]}, "inputs",
     "'inputs[0]' must be an image's data: URI or http(s) URL"),
])
def test_cohere_image_refusals_name_the_field_and_index(client, clip_saved, body, param, why):
    error = assert_envelope(client.post("/v2/embed", json={"model": clip_saved[0].name, **body}), 400)
    assert error["param"] == param, error
    assert why is None or why in error["message"], error


def test_a_text_only_model_refuses_cohere_images_by_name():
    with serve(FakeEngine(dim=16)) as client:
        error = assert_envelope(client.post("/v2/embed", json={"images": [data_uri(sample_images()[0])]}), 400,
                                "model_takes_texts_only")
        assert error["param"] == "images" and "'images[0]' is an image" in error["message"]
        error = assert_envelope(client.post("/v2/embed", json={"texts": ["a"], "input_type": "image"}), 400)
        assert error["param"] == "input_type" and "embeds texts only" in error["message"]
        error = assert_envelope(client.post("/embeddings_image", json={"input": [data_uri(sample_images()[0])]}),
                                400, "model_takes_texts_only")
        assert error["param"] == "input"
        error = assert_envelope(client.post("/embeddings", json={"input": [data_uri(sample_images()[0])],
                                                                 "modality": "image"}), 400, "model_takes_texts_only")
        assert error["param"] == "input"


# Infinity's /embeddings_image

def test_infinity_images_equal_transformers_in_openais_shape(client, clip_saved, web):
    images = sample_images()
    urls = [data_uri(images[0]), web.url("/dog.png"), data_uri(images[2], "WEBP"), data_uri(images[3])]
    response = client.post("/embeddings_image", json={"model": clip_saved[0].name, "input": urls,
                                                      "encoding_format": "float"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "list" and body["model"] == clip_saved[0].name and body["id"].startswith("infinity-")
    assert isinstance(body["created"], int)
    assert [row["index"] for row in body["data"]] == [0, 1, 2, 3]
    assert {row["object"] for row in body["data"]} == {"embedding"}
    assert body["usage"] == {"prompt_tokens": 4 * IMAGE_TOKENS, "total_tokens": 4 * IMAGE_TOKENS}
    ours = _floats([row["embedding"] for row in body["data"]])
    np.testing.assert_allclose(ours, reference_images(clip_saved, images), atol=1e-4, rtol=0)


def test_infinity_one_image_base64_and_its_unnamed_model(client, clip_saved):
    image = sample_images()[1]
    response = client.post("/embeddings_image", json={"model": "default/not-specified", "input": data_uri(image),
                                                      "encoding_format": "base64"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["model"] == clip_saved[0].name
    ours = np.frombuffer(base64.b64decode(body["data"][0]["embedding"]), dtype="<f4")[None]
    np.testing.assert_allclose(ours, reference_images(clip_saved, [image]), atol=1e-4, rtol=0)


def test_infinity_dimensions_cut_and_renormalise(client, clip_saved):
    image = sample_images()[0]
    response = client.post("/embeddings_image", json={"input": [data_uri(image)], "dimensions": 8})
    assert response.status_code == 200, response.text
    full = reference_images(clip_saved, [image])[0][:8]
    np.testing.assert_allclose(response.json()["data"][0]["embedding"], full / np.linalg.norm(full), atol=1e-4, rtol=0)


@pytest.mark.parametrize("body, why", [
    ({"input": ["data:image/png;base64,AAAA"]}, "'input[0]' is not a usable image"),
    ({"input": [data_uri(Image.new("RGB", (4, 4))), "file:///etc/passwd"]}, "'input[1]' is not a usable image"),
    ({"input": []}, "must not be an empty array"),
    ({"input": [3]}, "must be an image's URL or data: URI"),
    ({"input": ["data:image/png;base64,AAAA"], "encoding_format": "int8"}, "encoding_format"),
])
def test_infinity_refusals_name_the_input(client, clip_saved, body, why):
    error = assert_envelope(client.post("/embeddings_image", json={"model": clip_saved[0].name, **body}), 400)
    assert why in error["message"] or why == error["param"], error


# Infinity's /embeddings body: `modality`

def test_infinity_modality_image_on_embeddings_as_its_client_sends_it(client, clip_saved, web):
    """infinity_client's `embeddings` body: its unnamed model, `dimensions: 0` (the whole vector), each string
    an image; and with `modality: "text"` texts, as without the field."""
    images = sample_images()
    response = client.post("/embeddings", json={
        "model": "default/not-specified", "input": [data_uri(images[0]), web.url("/dog.png")], "modality": "image",
        "dimensions": 0, "encoding_format": "float"})
    assert response.status_code == 200, response.text
    assert response.json()["model"] == clip_saved[0].name
    assert response.json()["usage"]["prompt_tokens"] == 2 * IMAGE_TOKENS
    np.testing.assert_allclose(_floats([row["embedding"] for row in response.json()["data"]]),
                               reference_images(clip_saved, images[:2]), atol=1e-4, rtol=0)
    response = client.post("/v1/embeddings", json={"model": "default/not-specified", "input": TEXTS[:2],
                                                   "modality": "text", "dimensions": 0, "encoding_format": "float"})
    assert response.status_code == 200, response.text
    np.testing.assert_allclose(_floats([row["embedding"] for row in response.json()["data"]]),
                               reference_texts(clip_saved, TEXTS[:2]), atol=1e-4, rtol=0)


@pytest.mark.parametrize("body, param, why", [
    ({"input": ["a"], "modality": "audio"}, "modality", "'modality' must be one of text, image"),
    ({"input": [image_item(Image.new("RGB", (4, 4)))], "modality": "image"}, "input", "image's URL or data: URI"),
    ({"input": ["data:image/png;base64,AAAA"], "modality": "image"}, "input", "'input[0]' is not a usable image"),
    ({"input": ["a"], "dimensions": 0}, "dimensions", "between 1 and"),  # 0 is the whole vector in Infinity's body only
])
def test_infinity_modality_refusals(client, clip_saved, body, param, why):
    error = assert_envelope(client.post("/v1/embeddings", json=body), 400)
    assert error["param"] == param and why in error["message"], error
