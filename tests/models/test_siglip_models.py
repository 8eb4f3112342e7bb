"""SigLIP's text and vision towers on the CPU in float32 against transformers' SiglipModel, on tiny random
checkpoints transformers saved itself (tests/support/siglip_checkpoints.py). Vectors are L2-normalised on
both sides (the server's are); tolerance 1e-4 absolute per element.

The reference's texts are what SigLIP's model cards and transformers' zero-shot pipeline send:
tokenizer(texts, padding="max_length", max_length=64, truncation=True) with every array it returns passed
to get_text_features, for each tokenizer set-up the engine serves (left padding with an attention mask,
Gemma's as transformers loads it; right or left padding without a mask), for Siglip2Tokenizer's
lowercasing, and for SigLIP's original SiglipTokenizer (spiece.model, no tokenizer.json). Images: ours
through engine/image/preprocess.py, the reference through its PIL processor.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from rose_embed.engine.image.preprocess import preprocess
from rose_embed.engine.rose.engine import Engine
from tests.conftest import load_texts
from tests.support.clip_inputs import SHAPES, cpu_float32_engine, drawn_shape, normalised, shape_images
from tests.support.siglip_checkpoints import TEXT_LEN, save_siglip, sentencepiece_tokenizer, siglip_tokenizer

pytestmark = pytest.mark.slow

ATOL = 1e-4
TEXTS = ["the cat", "A Photo of the Dog!", "x", "the dog " * 40, "   spaces  around  "]


def _reference_texts(model, path, texts: list[str]) -> np.ndarray:
    from transformers import AutoTokenizer

    inputs = AutoTokenizer.from_pretrained(str(path))(texts, padding="max_length", max_length=TEXT_LEN,
                                                      truncation=True, return_tensors="pt")
    with torch.no_grad():
        return normalised(model.get_text_features(**inputs).pooler_output)


def _reference_images(model, path, images: list[Image.Image]) -> np.ndarray:
    from transformers import SiglipImageProcessorPil

    pixels = SiglipImageProcessorPil.from_pretrained(str(path))(images=images, return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        return normalised(model.get_image_features(pixel_values=pixels).pooler_output)


def _our_images(engine: Engine, images: list[Image.Image]) -> np.ndarray:
    return engine.embed_images(np.stack([preprocess(image, engine.spec.clip.image) for image in images]))


@pytest.mark.parametrize("tokenizer", [
    {}, {"padding_side": "right", "attention_mask": False}, {"padding_side": "left", "attention_mask": False},
    {"lowercasing": True},
])
def test_texts_equal_transformers_for_each_tokenizer_set_up(tmp_path, tokenizer):
    reference = save_siglip(tmp_path, tokenizer=siglip_tokenizer(**tokenizer))
    engine = cpu_float32_engine(tmp_path)
    np.testing.assert_allclose(engine.embed(TEXTS), _reference_texts(reference, tmp_path, TEXTS), atol=ATOL, rtol=0)


def test_siglip_tokenizer_texts_equal_transformers(tmp_path):
    """SigLIP's original checkpoints: SiglipTokenizer's canonicalized, SentencePiece-tokenized texts, padded
    with </s> on the right and read at the last position, as get_text_features reads them."""
    reference = save_siglip(tmp_path, tokenizer=sentencepiece_tokenizer(tmp_path / "spm"), seed=4)
    engine = cpu_float32_engine(tmp_path)
    texts = [*TEXTS, *load_texts(40), "", "Café, 東京 😀 — a photo!", "a </s> inside", "ΟΔΟΣ\u3000\u3000x"]
    np.testing.assert_allclose(engine.embed(texts), _reference_texts(reference, tmp_path, texts), atol=ATOL, rtol=0)


@pytest.mark.parametrize("variant", [
    {}, {"text_act": "gelu", "vision_act": "gelu_new", "seed": 1},
    {"image_size": 30, "patch_size": 7, "seed": 2},  # the patch grid leaves a remainder, as the conv does
    {"image_processor": {"size": {"height": 32, "width": 32}, "resample": 2}, "seed": 3},  # SigLIP 2's bilinear
])
def test_image_vectors_and_pixels_equal_transformers(tmp_path, variant):
    from transformers import SiglipImageProcessorPil

    reference = save_siglip(tmp_path, **variant)
    engine = cpu_float32_engine(tmp_path)
    images = shape_images()
    theirs = SiglipImageProcessorPil.from_pretrained(str(tmp_path))(images=images, return_tensors="np")
    ours = np.stack([preprocess(image, engine.spec.clip.image) for image in images])
    np.testing.assert_array_equal(ours, theirs["pixel_values"])
    np.testing.assert_allclose(_our_images(engine, images), _reference_images(reference, tmp_path, images),
                               atol=ATOL, rtol=0)


def test_caller_token_ids_are_padded_as_texts_are(tmp_path):
    """Token ids sent as they are get the text's padding: the same vector as the text they spell."""
    reference = save_siglip(tmp_path, tokenizer=siglip_tokenizer(padding_side="right", attention_mask=False), seed=6)
    engine = cpu_float32_engine(tmp_path)
    tokenizer = engine.tokenizer
    ids = tokenizer.encode_untruncated(["the cat"])[0]
    assert tokenizer.truncate_ids(ids).tolist() == tokenizer.encode(["the cat"])[0].tolist()
    assert len(tokenizer.encode(["the cat"])[0]) == TEXT_LEN
    np.testing.assert_allclose(engine.embed(["the cat"]), _reference_texts(reference, tmp_path, ["the cat"]),
                               atol=ATOL, rtol=0)


def test_zero_shot_picks_the_reference_label(tmp_path):
    """Labels and drawn shapes: each image's best label (and the whole similarity table) as transformers'."""
    reference = save_siglip(tmp_path, seed=8)
    engine = cpu_float32_engine(tmp_path)
    labels = list(SHAPES)
    images = [drawn_shape(kind, colour, size) for kind, colour in SHAPES.values() for size in ((48, 40), (30, 64))]
    ours = _our_images(engine, images) @ engine.embed(labels).T
    expected = _reference_images(reference, tmp_path, images) @ _reference_texts(reference, tmp_path, labels).T
    np.testing.assert_allclose(ours, expected, atol=ATOL, rtol=0)
    assert ours.argmax(axis=1).tolist() == expected.argmax(axis=1).tolist()
    assert len(set(expected.argmax(axis=1).tolist())) > 1  # the table is not one label for every image
