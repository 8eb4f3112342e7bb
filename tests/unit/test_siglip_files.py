"""SigLIP checkpoints as the loader reads them (transformers' saves, and what is refused by name), how their
texts are padded, and their image processor's defaults. No model runs here: tests/models/test_siglip_models.py
compares vectors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rose_embed.engine.contract.config import ModelOverrides
from rose_embed.engine.image.preprocess import image_preprocess
from rose_embed.engine.model_files.clip import TextPadding
from rose_embed.engine.model_files.loader import ModelLoadError, load_spec
from rose_embed.engine.text.tokenizer import tokenizer_for
from tests.support.siglip_checkpoints import IMAGE_SIZE, TEXT_LEN, save_siglip, siglip_tokenizer


@pytest.fixture(scope="module")
def siglip_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("siglip")
    save_siglip(out)
    return out


@pytest.fixture
def copy_of(siglip_dir, tmp_path):
    def make(name: str = "copy") -> Path:
        return Path(shutil.copytree(siglip_dir, tmp_path / name))
    return make


def _edit_json(path: Path, edit) -> None:
    value = json.loads(path.read_text())
    edit(value)
    path.write_text(json.dumps(value))


def test_transformers_save_is_a_siglip_embedder(siglip_dir):
    spec = load_spec(str(siglip_dir))
    assert (spec.architecture, spec.kind, spec.pooling, spec.is_causal) == ("siglip", "embed", "last", False)
    assert spec.embedding_dim == 48 and spec.max_seq_len == TEXT_LEN
    assert (spec.clip.image_size, spec.clip.image_seq_len) == (IMAGE_SIZE, (IMAGE_SIZE // 8) ** 2)  # no class token
    assert spec.clip.end_token is None
    assert spec.clip.text_padding is None  # Gemma's left padding, masked: the text alone, positions shifted


def test_texts_without_an_attention_mask_are_padded_on_their_side(tmp_path):
    for side in ("right", "left"):
        save_siglip(tmp_path / side, tokenizer=siglip_tokenizer(padding_side=side, attention_mask=False))
        spec = load_spec(str(tmp_path / side))
        assert spec.clip.text_padding == TextPadding(0, side)
        ids = tokenizer_for(spec).encode(["the cat"])[0].tolist()
        assert len(ids) == TEXT_LEN and ids.count(0) == TEXT_LEN - 4  # three tokens and <eos>
        assert (ids[-1] == 0) == (side == "right")


def test_siglip2_tokenizer_lowercases(tmp_path):
    save_siglip(tmp_path, tokenizer=siglip_tokenizer(lowercasing=True))
    tokenizer = tokenizer_for(load_spec(str(tmp_path)))
    assert tokenizer.encode(["The CAT"])[0].tolist() == tokenizer.encode(["the cat"])[0].tolist()


@pytest.mark.parametrize("edit, message", [
    (lambda cfg: cfg["text_config"].update(hidden_act="silu"), "text_config hidden_act 'silu'"),
    (lambda cfg: cfg["vision_config"].update(vision_use_head=False), "vision_use_head false"),
    (lambda cfg: cfg["text_config"].update(projection_size=24), "differ in width"),
    (lambda cfg: cfg["vision_config"].update(image_size=64), "makes 32x32 images, but the vision tower takes 64x64"),
    (lambda cfg: cfg.update(model_type="siglip2"), "NaFlex"),
])
def test_configs_not_followed_exactly_are_refused(copy_of, edit, message):
    folder = copy_of()
    _edit_json(folder / "config.json", edit)
    with pytest.raises(ModelLoadError, match=message):
        load_spec(str(folder))


@pytest.mark.parametrize("edit, message", [
    (lambda cfg: cfg.update(padding_side="right"), "pads on the right and returns an attention mask"),
    (lambda cfg: cfg.update(tokenizer_class="SiglipTokenizer"), "SiglipTokenizer\\) needs spiece.model"),
    (lambda cfg: cfg.update(tokenizer_class="T5Tokenizer"), "tokenizer_class 'T5Tokenizer'"),
])
def test_tokenizers_not_followed_exactly_are_refused(copy_of, edit, message):
    folder = copy_of()
    _edit_json(folder / "tokenizer_config.json", edit)
    with pytest.raises(ModelLoadError, match=message):
        load_spec(str(folder))


def test_tokenizer_json_tokenizer_without_it_is_refused_by_name(copy_of):
    """Only SiglipTokenizer's checkpoints are read without tokenizer.json (tests/unit/test_siglip_sentencepiece.py)."""
    folder = copy_of()
    (folder / "tokenizer.json").unlink()
    with pytest.raises(ModelLoadError, match="tokenizer_class 'GemmaTokenizer' and no tokenizer.json"):
        load_spec(str(folder))


def test_shorter_texts_and_other_pooling_are_refused(siglip_dir):
    with pytest.raises(ModelLoadError, match="--max-seq-len 32"):
        load_spec(str(siglip_dir), max_seq_len=32)
    with pytest.raises(ModelLoadError, match="--pooling"):
        load_spec(str(siglip_dir), overrides=ModelOverrides(pooling="mean"))


def test_image_processor_defaults_are_siglips():
    """SiglipImageProcessor's class defaults where a config leaves them out (or saves them as null)."""
    how = image_preprocess({"image_processor_type": "SiglipImageProcessor", "do_convert_rgb": None})
    assert (how.resize_to, how.crop_size, how.do_center_crop, how.resample) == ((224, 224), (224, 224), False, 3)
    assert how.mean == how.std == (0.5, 0.5, 0.5) and how.shortest_edge is None
