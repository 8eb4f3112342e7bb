"""CLIP's text and vision towers on the CPU in float32 against transformers' CLIPModel and
sentence-transformers' encode, on tiny random checkpoints those libraries saved themselves
(tests/support/clip_checkpoints.py). Vectors are L2-normalised on both sides (the server's are);
tolerance 1e-4 absolute per element (the two differ only in summation order). Images reach each
side as the same files would: ours through engine/image/preprocess.py, the reference through its
own PIL image processor.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from rose_embed.engine.image.preprocess import preprocess
from rose_embed.engine.rose.engine import Engine
from tests.support.clip_checkpoints import save_clip, save_st_clip
from tests.support.clip_inputs import SHAPES, cpu_float32_engine, drawn_shape, normalised, shape_images

pytestmark = pytest.mark.slow

ATOL = 1e-4
TEXTS = ["the cat", "a photo of the dog", "the dog <|endoftext|> and what follows it is never read",
         "a text long enough that the tokenizer cuts it at its limit, " * 3, "x"]


def _reference_texts(model, path, texts: list[str]) -> np.ndarray:
    from transformers import AutoTokenizer

    inputs = AutoTokenizer.from_pretrained(str(path))(texts, padding=True, truncation=True, return_tensors="pt")
    with torch.no_grad():
        return normalised(model.get_text_features(**inputs).pooler_output)


def _reference_images(model, path, images: list[Image.Image]) -> np.ndarray:
    from transformers import CLIPImageProcessorPil

    pixels = CLIPImageProcessorPil.from_pretrained(str(path))(images=images, return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        return normalised(model.get_image_features(pixel_values=pixels).pooler_output)


def _our_images(engine: Engine, images: list[Image.Image]) -> np.ndarray:
    return engine.embed_images(np.stack([preprocess(image, engine.spec.clip.image) for image in images]))


@pytest.mark.parametrize("variant", [
    {}, {"legacy_eos": True}, {"text_act": "gelu", "vision_act": "gelu_new", "seed": 1},
    {"image_size": 30, "patch_size": 7, "seed": 2},  # the patch grid leaves a remainder, as the conv does
])
def test_text_and_image_vectors_equal_transformers(tmp_path, variant):
    reference = save_clip(tmp_path, **variant)
    engine = cpu_float32_engine(tmp_path)
    # On the CPU the vision tower runs oneDNN's fused linears (engine/rose/layers/cpu_vit_block.py).
    assert all(type(layer).__name__ == "CpuFusedBlock" for layer in engine.runner.model.vision_layers)
    np.testing.assert_allclose(engine.embed(TEXTS), _reference_texts(reference, tmp_path, TEXTS), atol=ATOL, rtol=0)
    images = shape_images()
    np.testing.assert_allclose(_our_images(engine, images), _reference_images(reference, tmp_path, images),
                               atol=ATOL, rtol=0)


def test_zero_shot_picks_the_reference_label(tmp_path):
    """Labels and drawn shapes: each image's best label (and the whole similarity table) as transformers'."""
    reference = save_clip(tmp_path, seed=4)
    engine = cpu_float32_engine(tmp_path)
    labels = list(SHAPES)
    images = [drawn_shape(kind, colour, size) for kind, colour in SHAPES.values() for size in ((48, 40), (30, 64))]
    ours = _our_images(engine, images) @ engine.embed(labels).T
    with torch.no_grad():
        expected = _reference_images(reference, tmp_path, images) @ _reference_texts(reference, tmp_path, labels).T
    np.testing.assert_allclose(ours, expected, atol=ATOL, rtol=0)
    assert ours.argmax(axis=1).tolist() == expected.argmax(axis=1).tolist()
    assert len(set(expected.argmax(axis=1).tolist())) > 1  # the table is not one label for every image


@pytest.mark.parametrize("legacy_module", [False, True])
def test_sentence_transformers_packaging_equals_its_encode(tmp_path, legacy_module):
    from sentence_transformers import SentenceTransformer

    save_clip(tmp_path / "hf", seed=3)
    save_st_clip(tmp_path / "hf", tmp_path / "st", legacy_module)
    reference = SentenceTransformer(str(tmp_path / "st"), device="cpu")
    engine = cpu_float32_engine(tmp_path / "st")
    np.testing.assert_allclose(engine.embed(TEXTS), reference.encode(TEXTS, normalize_embeddings=True),
                               atol=ATOL, rtol=0)
    images = shape_images()
    np.testing.assert_allclose(_our_images(engine, images), reference.encode(images, normalize_embeddings=True),
                               atol=ATOL, rtol=0)


def test_a_text_model_has_no_vision_tower(default_engine):
    with pytest.raises(ValueError, match="no vision tower"):
        default_engine.embed_images(np.zeros((1, 3, 32, 32), np.float32))
