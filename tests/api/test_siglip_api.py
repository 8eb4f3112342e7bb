"""A SigLIP model on the in-process app with a real CPU engine in float32, through the server's whole path
(front end -> arena -> queue -> engine -> answer): texts and images mixed in one /v1/embeddings request
equal transformers' get_text_features (its tokenizer's padding="max_length" call, tests/models/
test_siglip_models.py) and get_image_features, normalised, within 1e-4, in their order; `usage` counts an
image as its patches (SigLIP has no class token). Tokenizers: Gemma's (tokenizer.json), left padded and masked
or right padded without a mask, and SigLIP's original SiglipTokenizer (spiece.model)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rose_embed.engine.contract.config import EngineConfig
from rose_embed.engine.rose.engine import Engine
from tests.support.clip_inputs import image_item, sample_images
from tests.support.fake_engine import serve
from tests.support.siglip_checkpoints import (
    IMAGE_SIZE, TEXT_LEN, save_siglip, sentencepiece_tokenizer, siglip_tokenizer,
)

pytestmark = pytest.mark.slow

PATCHES = (IMAGE_SIZE // 8) ** 2


def _reference(path, model, texts, images) -> tuple[np.ndarray, np.ndarray]:
    from transformers import AutoTokenizer, SiglipImageProcessorPil

    inputs = AutoTokenizer.from_pretrained(str(path))(texts, padding="max_length", max_length=TEXT_LEN,
                                                      truncation=True, return_tensors="pt")
    pixels = SiglipImageProcessorPil.from_pretrained(str(path))(images=images, return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        text_rows = model.get_text_features(**inputs).pooler_output
        image_rows = model.get_image_features(pixel_values=pixels).pooler_output
    return tuple(torch.nn.functional.normalize(rows, dim=-1).numpy() for rows in (text_rows, image_rows))


@pytest.mark.parametrize("tokenizer", [{}, {"padding_side": "right", "attention_mask": False}, "spiece.model"])
def test_texts_and_images_equal_transformers_in_their_order(tmp_path, tokenizer):
    made = sentencepiece_tokenizer(tmp_path / "spm") if tokenizer == "spiece.model" else siglip_tokenizer(**tokenizer)
    model = save_siglip(tmp_path, tokenizer=made, seed=7)
    texts, images = ["the cat", "A photo of the dog, 東京!", "the dog " * 40], sample_images()[:3]
    items = [texts[0], image_item(images[0]), image_item(images[1]), texts[1], texts[2], image_item(images[2])]
    engine = Engine(EngineConfig(model=str(tmp_path), device="cpu", dtype="float32"))
    with serve(engine) as client:
        response = client.post("/v1/embeddings", json={"input": items, "model": tmp_path.name})
        texts_alone = client.post("/v1/embeddings", json={"input": texts, "model": tmp_path.name})
    assert response.status_code == 200, response.text
    ours = np.array([row["embedding"] for row in response.json()["data"]], dtype=np.float32)
    text_rows, image_rows = _reference(tmp_path, model, texts, images)
    expected = np.stack([text_rows[0], image_rows[0], image_rows[1], text_rows[1], text_rows[2], image_rows[2]])
    np.testing.assert_allclose(ours, expected, atol=1e-4, rtol=0)
    assert response.json()["usage"]["prompt_tokens"] == texts_alone.json()["usage"]["prompt_tokens"] + 3 * PATCHES
