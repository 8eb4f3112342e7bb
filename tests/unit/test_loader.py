"""Model loading: directories, hub ids from the cache or at a revision, shards, pickled weights,
sentence-transformers files; our BERT layers against Hugging Face's on the same random weights."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from rose_embed.engine.contract.config import EngineConfig
from rose_embed.engine.rose.engine import Engine
from rose_embed.engine.model_files.loader import ModelLoadError, load_spec, resolve_model_dir

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
    engine = Engine(EngineConfig(dtype="float32", model=str(model_dir), max_batch_tokens=512))
    assert engine.spec.pooling == pooling and engine.spec.max_seq_len == 64
    got = engine.embed(TEXTS)
    want = hf_reference(model_dir, engine, TEXTS, pooling)
    cosine = (got * want).sum(1)
    assert cosine.min() >= 0.99999, cosine


def test_sharded_weights_load(tmp_path, default_engine):
    model_dir = make_bert(tmp_path, default_engine, pooling="mean", max_shard_size="2MB")
    assert (model_dir / "model.safetensors.index.json").exists()
    assert len(list(model_dir.glob("*.safetensors"))) > 1
    engine = Engine(EngineConfig(dtype="float32", model=str(model_dir), max_batch_tokens=512))
    cosine = (engine.embed(TEXTS) * hf_reference(model_dir, engine, TEXTS, "mean")).sum(1)
    assert cosine.min() >= 0.99999


def test_truncation_follows_max_seq_length(tmp_path, default_engine):
    model_dir = make_bert(tmp_path, default_engine, pooling="mean", max_seq_length=16)
    engine = Engine(EngineConfig(dtype="float32", model=str(model_dir), max_batch_tokens=512))
    ids = engine.tokenize(["word " * 100])[0]
    assert len(ids) == 16 and ids[-1] == 102  # [SEP] kept at the end, as the HF tokenizer does


def test_max_seq_length_past_the_position_table_is_cut_to_it(tmp_path, default_engine):
    """A sentence_bert_config.json max_seq_length of 600 on a BERT of 128 learned positions: a text
    past 128 tokens would index beyond the table (a 500 for every such request); it is cut at 128,
    and its vector is the model's own on those tokens."""
    model_dir = make_bert(tmp_path, default_engine, pooling="mean", max_seq_length=600)
    engine = Engine(EngineConfig(dtype="float32", model=str(model_dir), max_batch_tokens=512))
    assert engine.spec.max_seq_len == 128
    texts = ["word " * 300, "a short one"]
    assert [len(ids) for ids in engine.tokenize(texts)] == [128, 5]
    cosine = (engine.embed(texts) * hf_reference(model_dir, engine, texts, "mean")).sum(1)
    assert cosine.min() >= 0.99999, cosine


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


# ---- pickled weights (pytorch_model.bin) and hub revisions -----------------------------------------


def _as_pickled(model_dir: Path, *, legacy: bool = False, shards: int = 1, tie_lm_head: bool = False) -> Path:
    """Replace the safetensors weights by what transformers 4.x wrote with safe_serialization=False:
    torch.save of the state dict, one file or shards with pytorch_model.bin.index.json."""
    from safetensors.torch import load_file

    (weights,) = model_dir.glob("*.safetensors")
    state = load_file(str(weights))
    weights.unlink()
    if tie_lm_head:  # tied, as transformers 4.x pickled them: one storage under both names
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    if legacy:  # TensorFlow-era names, as in bert-base-uncased's pytorch_model.bin
        state = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
                 for k, v in state.items()}
    kwargs = {"_use_new_zipfile_serialization": False} if legacy else {}
    if shards == 1:
        torch.save(state, model_dir / "pytorch_model.bin", **kwargs)
        return model_dir
    names = sorted(state)
    weight_map = {}
    for i in range(shards):
        file = f"pytorch_model-{i + 1:05d}-of-{shards:05d}.bin"
        part = {n: state[n] for n in names[i::shards]}
        torch.save(part, model_dir / file, **kwargs)
        weight_map.update(dict.fromkeys(part, file))
    (model_dir / "pytorch_model.bin.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return model_dir


@pytest.mark.parametrize("variant", [{}, {"legacy": True}, {"shards": 3}])
def test_pytorch_model_bin_gives_the_vectors_of_its_safetensors_twin(tmp_path, default_engine, variant):
    twin = make_bert(tmp_path / "safetensors", default_engine, pooling="mean")
    pickled = _as_pickled(shutil.copytree(twin, tmp_path / "pickled"), **variant)
    assert not list(pickled.glob("*.safetensors")) and list(pickled.glob("pytorch_model*.bin"))
    want = Engine(EngineConfig(dtype="float32", model=str(twin), max_batch_tokens=512)).embed(TEXTS)
    got = Engine(EngineConfig(dtype="float32", model=str(pickled), max_batch_tokens=512)).embed(TEXTS)
    np.testing.assert_array_equal(got, want)


@pytest.mark.slow  # two engines on a tiny Qwen3 checkpoint
def test_pickled_qwen3_with_a_tied_lm_head_loads(tmp_path, texts):
    from tests.support.qwen3_checkpoints import qwen3_embedding, train_tokenizer

    twin = qwen3_embedding(tmp_path / "safetensors", train_tokenizer(texts[:200])).path
    pickled = _as_pickled(shutil.copytree(twin, tmp_path / "pickled"), tie_lm_head=True)
    want = Engine(EngineConfig(dtype="float32", model=str(twin), max_batch_tokens=512)).embed(TEXTS)
    np.testing.assert_array_equal(Engine(EngineConfig(dtype="float32", model=str(pickled), max_batch_tokens=512)).embed(TEXTS), want)


def test_pickled_objects_other_than_tensors_are_refused(tmp_path, default_engine):
    import argparse

    model_dir = _as_pickled(make_bert(tmp_path, default_engine, pooling="mean"))
    state = torch.load(model_dir / "pytorch_model.bin", weights_only=True)
    torch.save({**state, "training_args": argparse.Namespace(lr=1e-4)}, model_dir / "pytorch_model.bin")
    with pytest.raises(ModelLoadError, match=r"weights_only=True.*refuses to unpickle other objects"):
        Engine(EngineConfig(dtype="float32", model=str(model_dir), max_batch_tokens=512))


def test_no_weights_is_a_clear_error(tmp_path, default_engine):
    model_dir = make_bert(tmp_path, default_engine, pooling="mean")
    (model_dir / "model.safetensors").unlink()
    with pytest.raises(ModelLoadError, match="neither \\*.safetensors nor pytorch_model.bin"):
        Engine(EngineConfig(dtype="float32", model=str(model_dir), max_batch_tokens=512))


def test_revision_reaches_snapshot_download(tmp_path, default_engine, monkeypatch):
    """--revision travels CLI -> EngineConfig -> the hub download; a repository with pickled weights
    only gets a second download of those, at the same revision."""
    import huggingface_hub

    from rose_embed.server.cli.main import build_parser, config_from_args

    snapshot = _as_pickled(make_bert(tmp_path / "snapshot", default_engine, pooling="cls"))
    calls: list[dict] = []

    def fake_snapshot_download(repo_id, **kwargs):
        calls.append({"repo_id": repo_id, **kwargs})
        return str(snapshot)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    args = build_parser().parse_args(["serve", "--model", "acme/tiny-bert", "--revision", "v1.2", "--devices", "cpu"])
    config = config_from_args(args).engine
    assert (config.model, config.revision) == ("acme/tiny-bert", "v1.2")
    engine = Engine(replace(config, max_batch_tokens=512))
    assert engine.spec.pooling == "cls" and engine.spec.name == "acme/tiny-bert"
    assert [(c["repo_id"], c["revision"]) for c in calls] == [("acme/tiny-bert", "v1.2")] * 2
    assert "*.safetensors" in calls[0]["allow_patterns"] and calls[1]["allow_patterns"] == ["pytorch_model*.bin"]
    calls.clear()
    load_spec("acme/tiny-bert")
    assert calls[0]["revision"] is None  # no flag: the repository's default branch


def test_revision_of_a_local_model_is_refused(tmp_path, default_engine):
    model_dir = make_bert(tmp_path, default_engine, pooling="mean")
    with pytest.raises(ModelLoadError, match="revision 'main' applies to hub ids"):
        load_spec(str(model_dir), revision="main")
    with pytest.raises(ModelLoadError, match="the default model is local"):
        load_spec(None, revision="main")
