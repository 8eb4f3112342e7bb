"""Clients that embed images, unchanged, against a real server of a tiny CLIP model: LlamaIndex's
CohereEmbedding (a MultiModalEmbedding: images as /v2/embed `inputs` with `image_url` parts), Infinity's
generated client (`infinity_client`: /embeddings with `modality`, and /embeddings_image) and the OpenAI SDK
(image items in `input`, or in `extra_body`). Every vector equals transformers' get_image_features /
get_text_features on the same image or text, normalised, within 1e-4 in float32.

llama-index-embeddings-cohere holds Cohere's SDK below the major version the test extra installs, and
infinity_client holds httpx below the version installed beside it, so neither is in the extra; their
tests run where they are installed. tests/api/test_clip_dialects_api.py replays the bodies they send
(Cohere `inputs` with `input_type: "image"`, Infinity's `modality` and /embeddings_image) on every run.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import openai
import pytest
from PIL import Image

from tests.conftest import ServerProcess
from tests.support.client_support import checked_server
from tests.support.clip_checkpoints import save_clip
from tests.support.clip_inputs import (
    TEXTS,
    data_uri,
    image_item,
    reference_images,
    reference_texts,
    sample_images,
)

pytestmark = pytest.mark.slow  # each client end to end against a real server process

CLIP = "tiny-clip"
TOLERANCE = 1e-4


# Session-scoped, so that a missing package skips before the server fixture starts a server.
@pytest.fixture(scope="session")
def cohere_embedding():
    return pytest.importorskip("llama_index.embeddings.cohere")


@pytest.fixture(scope="session")
def infinity_client():
    return pytest.importorskip("infinity_client")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    path = tmp_path_factory.mktemp("clip") / "clip"
    return path, save_clip(path)


@pytest.fixture(scope="module")
def server(saved) -> Iterator[ServerProcess]:
    """The CLIP model alone: the first model, which answers Cohere's model names."""
    yield from checked_server("--dtype", "float32", "--model", f"{CLIP}={saved[0]}", "--max-batch-tokens", "512")


@pytest.fixture(scope="module")
def image_files(tmp_path_factory) -> list[Path]:
    """The sample images as the files a user passes: PNG (RGB, RGBA, grey) and a JPEG (named .jpg, which
    LlamaIndex sends as image/jpg)."""
    folder = tmp_path_factory.mktemp("images")
    files = []
    for i, image in enumerate(sample_images()):
        path = folder / (f"{i}.jpg" if i == 1 else f"{i}.png")
        image.save(path)
        files.append(path)
    return files


def opened(files: list[Path]) -> list[Image.Image]:
    """What the files hold once decoded (the JPEG's pixels are not the image it was saved from)."""
    return [Image.open(path) for path in files]


def assert_close(got, expected: np.ndarray) -> None:
    np.testing.assert_allclose(np.asarray(got, dtype=np.float32), expected, atol=TOLERANCE, rtol=0)


def test_llamaindex_cohere_embedding_images_and_texts(cohere_embedding, server, saved, image_files):
    """get_image_embedding posts /v2/embed `inputs` of one image_url part each, input_type "image", as
    `embed-english-v3.0` (the class's default, and a model name it allows images for)."""
    embed_model = cohere_embedding.CohereEmbedding(base_url=server.url, api_key="unused", max_retries=1)
    expected = reference_images(saved, opened(image_files))
    assert_close(embed_model.get_image_embedding_batch(image_files), expected)
    assert_close([embed_model.get_image_embedding(str(image_files[0]))], expected[:1])
    in_memory = io.BytesIO(image_files[2].read_bytes())  # a BytesIO: its format read by Pillow
    assert_close([asyncio.run(embed_model.aget_image_embedding(in_memory))], expected[2:3])
    assert_close(embed_model.get_text_embedding_batch(TEXTS), reference_texts(saved, TEXTS))
    assert_close([embed_model.get_query_embedding(TEXTS[1])], reference_texts(saved, TEXTS[1:2]))


def test_infinity_client_images_and_texts(infinity_client, server, saved):
    """Infinity's generated client: `embeddings` with `modality` image and text (its default model,
    "default/not-specified", the served model here, and `dimensions: 0`, the whole vector), and the older
    `embeddings_image`, with its default model and with the served name."""
    from infinity_client.api.default import embeddings, embeddings_image
    from infinity_client.models import (
        EmbeddingEncodingFormat,
        ImageEmbeddingInput,
        OpenAIEmbeddingInputImage,
        OpenAIEmbeddingInputText,
    )

    images = sample_images()
    uris = [data_uri(image) for image in images]
    expected = reference_images(saved, images)
    client = infinity_client.Client(base_url=server.url, raise_on_unexpected_status=True, timeout=60)
    answer = embeddings.sync(client=client, body=OpenAIEmbeddingInputImage(input_=uris))  # floats by default
    assert answer.model == CLIP
    assert_close([row.embedding for row in answer.data], expected)
    answer = embeddings.sync(client=client, body=OpenAIEmbeddingInputText(
        input_=TEXTS, encoding_format=EmbeddingEncodingFormat.FLOAT))
    assert_close([row.embedding for row in answer.data], reference_texts(saved, TEXTS))
    answer = embeddings_image.sync(client=client, body=ImageEmbeddingInput(
        input_=uris, encoding_format=EmbeddingEncodingFormat.FLOAT))
    assert answer.model == CLIP
    assert_close([row.embedding for row in answer.data], expected)
    answer = embeddings_image.sync(client=client, body=ImageEmbeddingInput(input_=uris[3], model=CLIP))
    assert_close([row.embedding for row in answer.data], expected[3:])


def test_openai_sdk_image_items_and_extra_body(server, saved):
    """Image items in `input` as they are, and in `extra_body` (what a type checker accepts), the answer in
    the SDK's default base64, decoded by it."""
    images = sample_images()[:2]
    sdk = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    expected = np.concatenate([reference_images(saved, images), reference_texts(saved, TEXTS[:1])])
    answer = sdk.embeddings.create(model=CLIP, input=[image_item(images[0]), image_item(images[1]), TEXTS[0]])
    assert_close([row.embedding for row in answer.data], expected)
    answer = sdk.embeddings.create(model=CLIP, input=[], extra_body={"input": [
        image_item(images[0]), image_item(images[1]), TEXTS[0]]})
    assert_close([row.embedding for row in answer.data], expected)
