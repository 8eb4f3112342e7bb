"""Model loading: directories, hub ids from the cache, shards, sentence-transformers files;
our BERT layers against Hugging Face's on the same random weights."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.config import EngineConfig
from engine.engine import Engine
from engine.loader import ModelLoadError, load_spec, resolve_model_dir

TEXTS = ["a short one", "", "and a somewhat longer sentence, with punctuation and numbers 12345.",
         " padded with spaces  ", "x " * 200]


def _tokenizer_files(default_engine) -> list[Path]:
    return [default_engine.spec.path / n for n in ("tokenizer.json", "tokenizer_config.json", "vocab.txt",
                                                  "special_tokens_map.json")]


def make_bert(tmp: Path, default_engine, *, pooling: str, max_shard_size: str | None = None,
              model_type: str = "bert", max_seq_length: int = 64) -> Path:
    """A tiny random-weight BERT with the default model's tokenizer and sentence-transformers files."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=128, max_position_embeddings=128)
    model = BertModel(config, add_pooling_layer=False).eval()
    kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
    model.save_pretrained(tmp, safe_serialization=True, **kwargs)
    for f in _tokenizer_files(default_engine):
        shutil.copy(f, tmp / f.name)
    (tmp / "1_Pooling").mkdir()
    (tmp / "1_Pooling" / "config.json").write_text(json.dumps({
        "word_embedding_dimension": 64, "pooling_mode_cls_token": pooling == "cls",
        "pooling_mode_mean_tokens": pooling == "mean", "pooling_mode_lasttoken": pooling == "last"}))
    (tmp / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]))
    (tmp / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": max_seq_length}))
    return tmp


def hf_reference(model_dir: Path, engine: Engine, texts: list[str], pooling: str) -> np.ndarray:
    from transformers import AutoModel

    model = AutoModel.from_pretrained(model_dir).eval()
    out = []
    for ids in engine.tokenize(texts):
        with torch.no_grad():
            hidden = model(input_ids=torch.from_numpy(ids.astype(np.int64))[None]).last_hidden_state[0]
        vec = {"cls": hidden[0], "mean": hidden.mean(0), "last": hidden[-1]}[pooling]
        out.append(torch.nn.functional.normalize(vec, dim=0).numpy())
    return np.stack(out)


@pytest.mark.parametrize("pooling", ["cls", "mean", "last"])
def test_engine_matches_hf_bert(tmp_path, default_engine, pooling):
    model_dir = make_bert(tmp_path, default_engine, pooling=pooling)
    engine = Engine(EngineConfig(model=str(model_dir), max_batch_tokens=512))
    assert engine.spec.pooling == pooling and engine.spec.max_seq_len == 64
    got = engine.embed(TEXTS)
    want = hf_reference(model_dir, engine, TEXTS, pooling)
    cosine = (got * want).sum(1)
    assert cosine.min() >= 0.99999, cosine


def test_sharded_weights_load(tmp_path, default_engine):
    model_dir = make_bert(tmp_path, default_engine, pooling="mean", max_shard_size="2MB")
    assert (model_dir / "model.safetensors.index.json").exists()
    assert len(list(model_dir.glob("*.safetensors"))) > 1
    engine = Engine(EngineConfig(model=str(model_dir), max_batch_tokens=512))
    cosine = (engine.embed(TEXTS) * hf_reference(model_dir, engine, TEXTS, "mean")).sum(1)
    assert cosine.min() >= 0.99999


def test_truncation_follows_max_seq_length(tmp_path, default_engine):
    model_dir = make_bert(tmp_path, default_engine, pooling="mean", max_seq_length=16)
    engine = Engine(EngineConfig(model=str(model_dir), max_batch_tokens=512))
    ids = engine.tokenize(["word " * 100])[0]
    assert len(ids) == 16 and ids[-1] == 102  # [SEP] kept at the end, as the HF tokenizer does


def test_hub_id_resolves_from_the_local_cache(tmp_path, default_engine, monkeypatch):
    # The layout huggingface_hub writes: models--org--name/{refs/main, snapshots/<rev>/...}.
    repo = tmp_path / "hub" / "models--acme--tiny-bert"
    snapshot = repo / "snapshots" / "0123456789abcdef0123456789abcdef01234567"
    make_bert(snapshot.parent.parent.parent / "build", default_engine, pooling="cls")
    shutil.copytree(tmp_path / "hub" / "build", snapshot)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(snapshot.name)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as hub_constants

    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    path, name = resolve_model_dir("acme/tiny-bert")
    assert name == "acme/tiny-bert" and path.resolve() == snapshot.resolve()
    assert load_spec("acme/tiny-bert").pooling == "cls"


def test_default_model_description(default_engine):
    spec = default_engine.spec
    assert spec.name == "sentence-transformers/all-MiniLM-L6-v2"
    assert (spec.pooling, spec.normalize, spec.max_seq_len, spec.hidden_size) == ("mean", True, 256, 384)


def test_missing_model_is_a_clear_error(tmp_path):
    with pytest.raises(ModelLoadError, match="config.json"):
        load_spec(str(tmp_path))
    with pytest.raises(ModelLoadError):
        load_spec(str(tmp_path / "no" / "such" / "dir"))
