"""CLIP checkpoints as the loader reads them (transformers' saves and sentence-transformers' packagings,
and what is refused by name), their texts' ids, and images preprocessed as transformers' PIL image
processor makes them, bit for bit. No model runs here: tests/models/test_clip_models.py compares vectors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw

from rose_embed.engine.contract.config import ModelOverrides
from rose_embed.engine.image.preprocess import image_preprocess, preprocess
from rose_embed.engine.model_files.clip import HIGHEST_ID
from rose_embed.engine.model_files.loader import ModelLoadError, load_spec
from rose_embed.engine.text.tokenizer import tokenizer_for
from tests.support.clip_checkpoints import IMAGE_SIZE, save_clip, save_st_clip, write_modules


@pytest.fixture(scope="module")
def clip_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("clip")
    save_clip(out)
    return out


@pytest.fixture
def copy_of(clip_dir, tmp_path):
    def make(name: str = "copy") -> Path:
        return Path(shutil.copytree(clip_dir, tmp_path / name))
    return make


def _edit_json(path: Path, edit) -> None:
    value = json.loads(path.read_text())
    edit(value)
    path.write_text(json.dumps(value))


def test_transformers_save_is_a_clip_embedder(clip_dir):
    spec = load_spec(str(clip_dir))
    config = json.loads((clip_dir / "config.json").read_text())
    assert (spec.architecture, spec.kind, spec.pooling, spec.is_causal) == ("clip", "embed", "last", True)
    assert spec.embedding_dim == config["projection_dim"] == 24
    assert spec.max_seq_len == config["text_config"]["max_position_embeddings"]
    assert spec.clip.end_token == config["text_config"]["eos_token_id"]
    assert (spec.clip.image_size, spec.clip.image_seq_len) == (IMAGE_SIZE, (IMAGE_SIZE // 8) ** 2 + 1)


def test_legacy_eos_config_pools_at_the_highest_id(tmp_path):
    save_clip(tmp_path, legacy_eos=True)
    assert load_spec(str(tmp_path)).clip.end_token == HIGHEST_ID


@pytest.mark.parametrize("legacy_module", [False, True])
def test_sentence_transformers_packagings_are_recognized(clip_dir, tmp_path, legacy_module):
    save_st_clip(clip_dir, tmp_path / "st", legacy_module)
    spec = load_spec(str(tmp_path / "st"))
    assert spec.architecture == "clip" and spec.path == (tmp_path / "st").resolve()


def test_legacy_module_in_its_own_folder(clip_dir, tmp_path):
    """sentence-transformers 2.x saved CLIPModel's files in the module's folder (0_CLIPModel), a
    Normalize module possibly after it."""
    shutil.copytree(clip_dir, tmp_path / "0_CLIPModel")
    write_modules(tmp_path, [{"idx": 0, "name": "0", "path": "0_CLIPModel", "type": "sentence_transformers.models.CLIPModel"},
                             {"idx": 1, "name": "1", "path": "1_Normalize", "type": "sentence_transformers.models.Normalize"}])
    assert load_spec(str(tmp_path)).path == tmp_path / "0_CLIPModel"


def test_module_after_clip_is_refused(clip_dir, tmp_path):
    shutil.copytree(clip_dir, tmp_path / "0_CLIPModel")
    write_modules(tmp_path, [{"idx": 0, "name": "0", "path": "0_CLIPModel", "type": "sentence_transformers.models.CLIPModel"},
                             {"idx": 1, "name": "1", "path": "1_Dense", "type": "sentence_transformers.models.Dense"}])
    with pytest.raises(ModelLoadError, match="'Dense' after a CLIP model"):
        load_spec(str(tmp_path))


def test_other_features_method_is_refused(clip_dir, tmp_path):
    save_st_clip(clip_dir, tmp_path / "st")
    _edit_json(tmp_path / "st" / "sentence_bert_config.json",
               lambda cfg: cfg["modality_config"]["text"].update(method_output_name="last_hidden_state"))
    with pytest.raises(ModelLoadError, match="get_text_features's pooler_output"):
        load_spec(str(tmp_path / "st"))


@pytest.mark.parametrize("edit, message", [
    (lambda cfg: cfg["text_config"].update(hidden_act="silu"), "text_config hidden_act 'silu'"),
    (lambda cfg: cfg["vision_config"].update(num_channels=1), "num_channels 1"),
    (lambda cfg: cfg["vision_config"].update(image_size=64), "makes 32x32 images, but the vision tower takes 64x64"),
])
def test_configs_not_run_exactly_are_refused(copy_of, edit, message):
    folder = copy_of()
    _edit_json(folder / "config.json", edit)
    with pytest.raises(ModelLoadError, match=message):
        load_spec(str(folder))


@pytest.mark.parametrize("edit, message", [
    (lambda cfg: cfg["image_processor"].update(crop_pct=0.9), "settings crop_pct are not supported"),
    (lambda cfg: cfg["image_processor"].update(image_processor_type="ViTImageProcessor"), "'ViTImageProcessor'"),
    (lambda cfg: cfg["image_processor"].update(size={"shortest_edge": 32, "longest_edge": 64}), "size"),
    (lambda cfg: cfg.pop("image_processor"), "has no image processor"),
])
def test_image_processors_not_followed_exactly_are_refused(copy_of, edit, message):
    folder = copy_of()
    _edit_json(folder / "processor_config.json", edit)
    with pytest.raises(ModelLoadError, match=message):
        load_spec(str(folder))


def test_overrides_of_its_pooling_are_refused(clip_dir):
    with pytest.raises(ModelLoadError, match="--pooling"):
        load_spec(str(clip_dir), overrides=ModelOverrides(pooling="mean"))


@pytest.mark.parametrize("legacy_eos", [False, True])
def test_texts_end_at_the_token_transformers_pools(tmp_path, legacy_eos):
    from transformers import AutoTokenizer

    save_clip(tmp_path, legacy_eos=legacy_eos)
    ours = tokenizer_for(load_spec(str(tmp_path)))
    reference = AutoTokenizer.from_pretrained(str(tmp_path))
    eos = reference.eos_token_id
    texts = ["the cat", "the dog <|endoftext|> and more after it", "a text long enough to be cut at the limit " * 3]
    for text, ids in zip(texts, ours.encode(texts)):
        full = reference(text, truncation=True)["input_ids"]
        pooled = int(np.argmax(full)) if legacy_eos else full.index(eos)
        assert ids.tolist() == full[: pooled + 1]
    assert ours.truncate_ids([5, 6, eos, 7, eos]).tolist() == [5, 6, eos]


def _images() -> list[Image.Image]:
    rng = np.random.default_rng(3)
    noise = [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for h, w in
             ((40, 50), (97, 31), (32, 32), (11, 20), (300, 301))]
    rgba = Image.fromarray(rng.integers(0, 256, (45, 60, 4), dtype=np.uint8), "RGBA")
    gray = Image.fromarray(rng.integers(0, 256, (50, 40), dtype=np.uint8), "L")
    palette = Image.new("P", (36, 36), 0)
    ImageDraw.Draw(palette).ellipse((4, 4, 30, 30), fill=1)
    palette.info["transparency"] = 0
    return [*noise, rgba, gray, palette]


@pytest.mark.parametrize("settings", [
    {"size": {"shortest_edge": 32}, "crop_size": {"height": 32, "width": 32}},
    {"size": {"shortest_edge": 24}, "crop_size": {"height": 32, "width": 28}},  # a crop past the image: zero padding
    {"size": {"height": 30, "width": 20}, "do_center_crop": False, "resample": 2},
    {"size": {"shortest_edge": 32}, "crop_size": {"height": 32, "width": 32}, "do_normalize": False,
     "do_rescale": False},
])
def test_pixels_equal_transformers_pil_image_processor(settings):
    from transformers import CLIPImageProcessorPil

    reference = CLIPImageProcessorPil(**settings)
    how = image_preprocess(reference.to_dict())
    for image in _images():
        expected = reference(images=image, return_tensors="np")["pixel_values"][0]
        ours = preprocess(image, how)
        assert ours.dtype == np.float32 and ours.shape == expected.shape
        np.testing.assert_array_equal(ours, expected)
