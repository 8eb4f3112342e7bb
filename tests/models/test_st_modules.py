"""sentence-transformers checkpoints, saved by sentence-transformers itself, against its own encode.

Each model here is built from sentence-transformers' modules (Transformer on a tiny random
Hugging Face model, Pooling, Dense, LayerNorm, Normalize, ...) and saved with
`SentenceTransformer.save`; the engine loads the directory and its vectors are compared with
`SentenceTransformer(path).encode` on the same files: cosine >= 0.99999 in fp32, same size.
The same holds for the layouts older versions wrote (2.x-5.x module paths, legacy pooling
flags, Dense weights in pytorch_model.bin), and every module the engine cannot run is refused
by name (engine/model_files/st_modules.py).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from transformers import BertConfig, RobertaConfig, XLMRobertaConfig

from rose_embed.engine.contract.config import EngineConfig, ModelOverrides
from rose_embed.engine.rose.engine import Engine
from rose_embed.engine.model_files.loader import ModelLoadError, load_spec
from tests.conftest import REPO, ServerProcess, free_port, load_texts
from tests.support.qwen3_checkpoints import tiny_config
from tests.support.st_checkpoints import (bert_tokenizer, load_reference, pplx_config, qwen_tokenizer, roberta_tokenizer,
                                  save_hf_model, save_st_model, xlmr_tokenizer)

pytestmark = pytest.mark.slow  # checkpoints saved by sentence-transformers vs its encode; a server

MIN_COSINE = 0.99999
# Workload paragraphs, an empty text and one cut at the length limit. No leading or trailing
# whitespace: sentence-transformers 6 feeds texts as they are, 2.x-5.x stripped them; that
# only shows with a byte-level or unigram tokenizer (test_roberta_families checks such texts
# against 6.x, which the engine follows).
TEXTS = load_texts(6) + ["", "a short one", "x " * 300]


def _modules():
    from sentence_transformers.sentence_transformer import modules

    return modules


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def assert_matches_sentence_transformers(path: Path, texts: list[str] = TEXTS, trust_remote_code: bool = False,
                                         **engine_options) -> Engine:
    reference = load_reference(path, trust_remote_code).encode(texts, convert_to_numpy=True)
    engine = Engine(EngineConfig(dtype="float32", model=str(path), max_batch_tokens=2048, **engine_options))
    ours = engine.embed(texts)
    assert ours.shape == reference.shape and engine.dimensions == reference.shape[1]
    cosine = _cosine(ours, reference)
    assert cosine.min() >= MIN_COSINE, cosine
    return engine


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bert-hf")
    save_hf_model(out, BertConfig(vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=128, max_position_embeddings=128))
    bert_tokenizer(out)
    return out


# --- pooling: every mode sentence-transformers has, each followed by a Dense + Tanh so that a
# vector's scale (mean vs mean_sqrt_len, say) changes the direction that cosine compares.

@pytest.mark.parametrize("mode,ours", [
    ("cls", "cls"), ("mean", "mean"), ("lasttoken", "last"), ("max", "max"),
    ("mean_sqrt_len_tokens", "mean_sqrt_len"), ("weightedmean", "weighted_mean"),
    (("cls", "mean", "max"), "cls+mean+max"),
])
def test_pooling_modes_match(tmp_path, bert_dir, mode, ours):
    m = _modules()
    path = save_st_model(tmp_path / "st", bert_dir, pooling=mode, after=[lambda width: m.Dense(width, 48)])
    engine = assert_matches_sentence_transformers(path)
    assert engine.spec.pooling == ours and engine.dimensions == 48


def test_cls_pooling_as_sentence_transformers_6_saves_it(tmp_path, bert_dir):
    # The layout that was once read as mean pooling: 6.x's module path and `pooling_mode`.
    m = _modules()
    path = save_st_model(tmp_path / "st", bert_dir, pooling="cls", after=[m.Normalize()])
    types = [entry["type"] for entry in json.loads((path / "modules.json").read_text())]
    assert types[1] == "sentence_transformers.sentence_transformer.modules.pooling.Pooling"
    assert json.loads((path / "1_Pooling" / "config.json").read_text())["pooling_mode"] == "cls"
    assert assert_matches_sentence_transformers(path).spec.pooling == "cls"


def _dense_stack(m):
    return [lambda width: m.Dense(width, 24), lambda width: m.Dense(width, 16, bias=False, activation_function=None),
            m.Normalize()]


def test_dense_tanh_identity_normalize_and_truncate_dim(tmp_path, bert_dir):
    m = _modules()
    path = save_st_model(tmp_path / "st", bert_dir, pooling="cls", after=_dense_stack(m), truncate_dim=12)
    dense = [json.loads((path / d / "config.json").read_text())["activation_function"] for d in ("2_Dense", "3_Dense")]
    assert dense == ["torch.nn.modules.activation.Tanh", "torch.nn.modules.linear.Identity"]
    engine = assert_matches_sentence_transformers(path)
    assert (engine.spec.hidden_size, engine.spec.embedding_dim, engine.spec.truncate_dim) == (64, 12, 12)
    full = save_st_model(tmp_path / "full", bert_dir, pooling="cls", after=_dense_stack(m))
    assert assert_matches_sentence_transformers(full).dimensions == 16


def test_layer_norm_dropout_and_other_activations(tmp_path, bert_dir):
    m = _modules()
    after = [lambda width: m.Dense(width, 32, activation_function=torch.nn.GELU()), m.Dropout(0.3),
             lambda width: m.LayerNorm(width),
             lambda width: m.Dense(width, 32, activation_function=torch.nn.SiLU(), use_residual=True),
             lambda width: m.Dense(width, 20, activation_function=torch.nn.ReLU(), use_residual=True)]
    path = save_st_model(tmp_path / "st", bert_dir, pooling="mean", after=after, seed=3)
    layer_norm = load_file(path / "4_LayerNorm" / "model.safetensors")
    with torch.no_grad():  # away from the initial ones / zeros, so that a LayerNorm run without them would show
        layer_norm = {k: v + 0.5 * torch.randn(v.shape, generator=torch.Generator().manual_seed(4))
                      for k, v in layer_norm.items()}
    from safetensors.torch import save_file

    save_file(layer_norm, path / "4_LayerNorm" / "model.safetensors")
    assert assert_matches_sentence_transformers(path).dimensions == 20


# --- the layouts of older versions, and other spellings of the same classes

def as_legacy_layout(path: Path, module_prefix: str = "sentence_transformers.models.") -> Path:
    """Rewrite a 6.x save into what 2.x wrote: `sentence_transformers.models.X` types, one
    boolean per pooling mode, Dense weights in pytorch_model.bin, max_seq_length in
    sentence_bert_config.json."""
    modules = json.loads((path / "modules.json").read_text())
    for entry in modules:
        entry["type"] = module_prefix + entry["type"].rsplit(".", 1)[-1]
        folder = path / entry["path"]
        if entry["type"].endswith("Pooling"):
            cfg = json.loads((folder / "config.json").read_text())
            modes = [cfg["pooling_mode"]] if isinstance(cfg["pooling_mode"], str) else cfg["pooling_mode"]
            flags = {"cls": "pooling_mode_cls_token", "mean": "pooling_mode_mean_tokens", "max": "pooling_mode_max_tokens",
                     "mean_sqrt_len_tokens": "pooling_mode_mean_sqrt_len_tokens",
                     "weightedmean": "pooling_mode_weightedmean_tokens", "lasttoken": "pooling_mode_lasttoken"}
            legacy = {"word_embedding_dimension": cfg["embedding_dimension"]}
            legacy.update({flag: mode in modes for mode, flag in flags.items()})
            (folder / "config.json").write_text(json.dumps(legacy))
        elif entry["type"].endswith("Dense"):
            cfg = json.loads((folder / "config.json").read_text())
            (folder / "config.json").write_text(json.dumps(
                {k: cfg[k] for k in ("in_features", "out_features", "bias", "activation_function")}))
            torch.save(load_file(folder / "model.safetensors"), folder / "pytorch_model.bin")
            (folder / "model.safetensors").unlink()
    (path / "modules.json").write_text(json.dumps(modules))
    (path / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 48, "do_lower_case": False}))
    return path


def test_legacy_layout_matches_and_equals_the_new_one(tmp_path, bert_dir):
    m = _modules()
    new = save_st_model(tmp_path / "new", bert_dir, pooling=("cls", "mean"), after=_dense_stack(m))
    legacy = as_legacy_layout(Path(shutil.copytree(new, tmp_path / "legacy")))
    assert json.loads((legacy / "modules.json").read_text())[2]["type"] == "sentence_transformers.models.Dense"
    assert (legacy / "2_Dense" / "pytorch_model.bin").is_file()
    engine = assert_matches_sentence_transformers(legacy)
    assert (engine.spec.pooling, engine.spec.max_seq_len, engine.dimensions) == ("cls+mean", 48, 16)
    texts = TEXTS[:6]  # below 48 tokens both read the same
    short = [t[:100] for t in texts]
    np.testing.assert_allclose(engine.embed(short), Engine(EngineConfig(dtype="float32", model=str(new))).embed(short), atol=1e-6)


@pytest.mark.parametrize("prefix", ["sentence_transformers.models.Pooling.", "sentence_transformers.models.pooling.",
                                    "sentence_transformers.sentence_transformer.modules."])
def test_module_types_are_read_by_class_name(tmp_path, bert_dir, prefix):
    m = _modules()
    path = save_st_model(tmp_path / "st", bert_dir, pooling="cls", after=_dense_stack(m))
    modules = json.loads((path / "modules.json").read_text())
    for entry in modules:
        entry["type"] = prefix + entry["type"].rsplit(".", 1)[-1]
    (path / "modules.json").write_text(json.dumps(modules))
    spec = load_spec(str(path))
    assert (spec.pooling, spec.embedding_dim, len(spec.head)) == ("cls", 16, 3)


# --- every family the engine runs, saved through sentence-transformers

def _roberta_like(out: Path, tokenizer, config_class) -> Path:
    out.mkdir(parents=True)
    vocab_size = tokenizer(out)
    # 128 positions past the padding index: sentence-transformers caps max_seq_length at
    # max_position_embeddings itself, so the limit is set explicitly, as real checkpoints do.
    return save_hf_model(out, config_class(vocab_size=vocab_size, hidden_size=64, num_hidden_layers=2,
                                           num_attention_heads=4, intermediate_size=128, max_position_embeddings=130,
                                           pad_token_id=1, bos_token_id=0, eos_token_id=2))


@pytest.mark.parametrize("family", ["roberta", "xlm-roberta"])
def test_roberta_families(tmp_path, family):
    tokenizer, config_class = {"roberta": (roberta_tokenizer, RobertaConfig),
                               "xlm-roberta": (xlmr_tokenizer, XLMRobertaConfig)}[family]
    hf = _roberta_like(tmp_path / "hf", tokenizer, config_class)
    path = save_st_model(tmp_path / "st", hf, pooling="mean", max_seq_length=128, after=[_modules().Normalize()])
    # Whitespace around a text is content for these tokenizers, and sentence-transformers 6 keeps it.
    engine = assert_matches_sentence_transformers(path, TEXTS + ["  leading spaces", "trailing newline\n", " \t "])
    assert engine.spec.hf_config["model_type"] == family and engine.spec.max_seq_len == 128


def test_do_lower_case_lowercases_before_a_cased_tokenizer(tmp_path):
    hf = _roberta_like(tmp_path / "hf", roberta_tokenizer, RobertaConfig)
    path = save_st_model(tmp_path / "st", hf, pooling="mean", max_seq_length=128)
    cfg = json.loads((path / "sentence_bert_config.json").read_text())
    (path / "sentence_bert_config.json").write_text(json.dumps({**cfg, "do_lower_case": True}))
    texts = ["The Quick Brown Fox", "SHOUTED WORDS", *TEXTS[:4]]
    engine = assert_matches_sentence_transformers(path, texts)
    assert engine.spec.lowercase
    cased = Engine(EngineConfig(dtype="float32", model=str(hf), max_seq_len=128))  # the same model without the module's setting
    assert not np.array_equal(cased.tokenize(texts[:1])[0], engine.tokenize(texts[:1])[0])


def test_qwen3_embedding_layout(tmp_path):
    # Causal, last token; the tokenizer appends <|endoftext|> as Qwen3-Embedding's does.
    hf = tmp_path / "hf"
    hf.mkdir()
    save_hf_model(hf, tiny_config(qwen_tokenizer(hf)))
    path = save_st_model(tmp_path / "st", hf, pooling="lasttoken", after=[_modules().Normalize()],
                         prompts={"query": "Instruct: find the function\nQuery:", "document": ""})
    texts = [t for t in TEXTS if t]  # sentence-transformers' last token of an empty text is the end token too
    engine = assert_matches_sentence_transformers(path, texts + [""])
    assert (engine.spec.architecture, engine.spec.is_causal, engine.spec.pooling) == ("qwen3", True, "last")


def test_pplx_embed_layout(tmp_path):
    # Bidirectional Qwen3 under pplx-embed's model_type, run by sentence-transformers through
    # remote code (a stand-in for pplx-embed's own); mean pooling, raw (quantisable) output.
    hf = tmp_path / "hf"
    hf.mkdir()
    save_hf_model(hf, pplx_config(hf, tiny_config(qwen_tokenizer(hf))), trust_remote_code=True)
    path = save_st_model(tmp_path / "st", hf, pooling="mean", trust_remote_code=True)
    engine = assert_matches_sentence_transformers(path, trust_remote_code=True)
    assert (engine.spec.is_causal, engine.spec.quantization) == (False, "tanh")
    # The reference really is bidirectional: run causally, the engine no longer matches it.
    causal = Engine(EngineConfig(dtype="float32", model=str(path), model_overrides=ModelOverrides(attention="causal")))
    reference = load_reference(path, True).encode(TEXTS[:3], convert_to_numpy=True)
    assert _cosine(causal.embed(TEXTS[:3]), reference).min() < 0.999


# --- refused by name

def _with_modules(path: Path, edit) -> Path:
    modules = json.loads((path / "modules.json").read_text())
    (path / "modules.json").write_text(json.dumps(edit(modules)))
    return path


def _entry(idx: int, type_ref: str, folder: str = "") -> dict:
    return {"idx": idx, "name": str(idx), "path": folder, "type": type_ref}


REFUSED = {
    "word embeddings first": (lambda ms: [_entry(0, "sentence_transformers.models.WordEmbeddings", "0_WordEmbeddings"),
                                          *ms[1:]], "'0_WordEmbeddings'", "WordEmbeddings"),
    "lstm before pooling": (lambda ms: [ms[0], _entry(1, "sentence_transformers.models.LSTM", "1_LSTM"), *ms[1:]],
                            "'1_LSTM'", "LSTM"),
    "custom module": (lambda ms: [*ms, _entry(9, "my_package.modeling.MyHead", "9_MyHead")], "'9_MyHead'",
                      "my_package.modeling.MyHead"),
    "router": (lambda ms: [_entry(0, "sentence_transformers.base.modules.router.Router"), *ms[1:]],
               "'0'", "Router"),
    "static embedding": (lambda ms: [_entry(0, "sentence_transformers.models.StaticEmbedding", "0_StaticEmbedding"),
                                     ms[1]], "'0_StaticEmbedding'", "StaticEmbedding"),
    "dense before pooling": (lambda ms: [ms[0], ms[2], ms[1], *ms[3:]], "'2_Dense'", "dense.Dense"),
    "no pooling": (lambda ms: [ms[0]], "no Pooling module", ""),
}


@pytest.mark.parametrize("case", REFUSED)
def test_unknown_or_misplaced_modules_are_refused_by_name(tmp_path, bert_dir, case):
    edit, folder, type_name = REFUSED[case]
    path = save_st_model(tmp_path / "st", bert_dir, pooling="cls", after=[lambda width: _modules().Dense(width, 8)])
    with pytest.raises(ModelLoadError) as raised:
        load_spec(str(_with_modules(path, edit)))
    assert folder in str(raised.value) and type_name in str(raised.value), raised.value


@pytest.mark.parametrize("change,message", [
    ({"activation_function": "torch.nn.modules.activation.Softmax"}, "activation_function 'torch.nn.modules"),
    ({"activation_function": "my_package.Swish"}, "activation_function 'my_package.Swish'"),
    ({"in_features": 32}, "in_features 32"),
    ({"module_input_name": "token_embeddings"}, "module_input_name 'token_embeddings'"),
])
def test_dense_settings_the_engine_cannot_run_are_refused(tmp_path, bert_dir, change, message):
    path = save_st_model(tmp_path / "st", bert_dir, pooling="cls", after=[lambda width: _modules().Dense(width, 8)])
    cfg = json.loads((path / "2_Dense" / "config.json").read_text())
    (path / "2_Dense" / "config.json").write_text(json.dumps({**cfg, **change}))
    with pytest.raises(ModelLoadError, match="'2_Dense'") as raised:
        load_spec(str(path))
    assert message in str(raised.value) and "dense.Dense" in str(raised.value)


def test_pooling_without_the_prompt_is_refused_when_there_are_prompts(tmp_path, bert_dir):
    path = save_st_model(tmp_path / "st", bert_dir, pooling="mean", include_prompt=False, prompts={"query": "q: "})
    with pytest.raises(ModelLoadError, match="'1_Pooling'.*include_prompt"):
        load_spec(str(path))
    no_prompts = save_st_model(tmp_path / "plain", bert_dir, pooling="mean", include_prompt=False)
    assert_matches_sentence_transformers(no_prompts)


def test_chat_template_rendering_is_refused(tmp_path, bert_dir):
    """sentence-transformers 6.x saves a model whose tokenizer has a chat template with the message
    modality, and then renders every text through that template before tokenizing it."""
    import shutil

    hf_dir = tmp_path / "hf"
    shutil.copytree(bert_dir, hf_dir)
    tokenizer_config = json.loads((hf_dir / "tokenizer_config.json").read_text())
    tokenizer_config["chat_template"] = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }} {% endfor %}"
    (hf_dir / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    path = save_st_model(tmp_path / "st", hf_dir, pooling="mean")
    with pytest.raises(ModelLoadError, match="module '0'.*message modality"):
        load_spec(str(path))


@pytest.mark.parametrize("processing,refused", [
    ({"text": {"max_length": 16}}, "text"),
    ({"common": {"truncation": False}, "chat_template": {"add_generation_prompt": True}}, "chat_template, common"),
    ({"image": {"size": 224}}, None),
])
def test_processing_kwargs_that_reach_the_text_are_refused(tmp_path, bert_dir, processing, refused):
    """The Transformer module's processing_kwargs are tokenizer arguments sentence-transformers
    passes on each call (a text max_length of 16 cuts every text there); the image's never touch a text."""
    path = save_st_model(tmp_path / "st", bert_dir, pooling="mean")
    config = json.loads((path / "sentence_bert_config.json").read_text())
    (path / "sentence_bert_config.json").write_text(json.dumps({**config, "processing_kwargs": processing}))
    if refused is None:
        assert_matches_sentence_transformers(path)
        return
    with pytest.raises(ModelLoadError, match=f"module '0'.*processing_kwargs for {refused} "):
        load_spec(str(path))


def test_lengths_of_their_own_for_queries_or_documents_are_refused(tmp_path, bert_dir):
    """A query_length of 8: sentence-transformers' encode_query cuts each query there, which a request
    with input_type query would not."""
    path = save_st_model(tmp_path / "st", bert_dir, pooling="mean")
    config = json.loads((path / "sentence_bert_config.json").read_text())
    (path / "sentence_bert_config.json").write_text(json.dumps({**config, "query_length": 8}))
    with pytest.raises(ModelLoadError, match="module '0'.*query_length are not supported"):
        load_spec(str(path))


def test_server_refuses_an_unknown_module_at_start(tmp_path, bert_dir):
    path = save_st_model(tmp_path / "st", bert_dir, pooling="cls")
    _with_modules(path, lambda ms: [*ms, _entry(2, "sentence_transformers.models.CNN", "2_CNN")])
    run = subprocess.run([sys.executable, "-m", "rose_embed", "serve", "--model", str(path), "--port", str(free_port())],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode != 0
    assert "'2_CNN'" in run.stderr and "sentence_transformers.models.CNN" in run.stderr, run.stderr


def test_server_serves_the_dense_and_truncated_size(tmp_path, bert_dir):
    m = _modules()
    path = save_st_model(tmp_path / "st", bert_dir, pooling="cls", after=_dense_stack(m), truncate_dim=12)
    reference = load_reference(path).encode(TEXTS[:4], convert_to_numpy=True)
    server = ServerProcess("--dtype", "float32", "--model", str(path), "--max-batch-tokens", "2048")
    try:
        r = httpx.post(server.url + "/v1/embeddings", json={"input": TEXTS[:4], "model": path.name}, timeout=60)
        assert r.status_code == 200, r.text
        ours = np.array([d["embedding"] for d in r.json()["data"]], dtype=np.float32)
        assert ours.shape == (4, 12) and _cosine(ours, reference).min() >= MIN_COSINE
        small = httpx.post(server.url + "/v1/embeddings", json={"input": "a", "model": path.name, "dimensions": 8})
        assert small.status_code == 200 and len(small.json()["data"][0]["embedding"]) == 8
        too_big = httpx.post(server.url + "/v1/embeddings", json={"input": "a", "model": path.name, "dimensions": 16})
        assert too_big.status_code == 400 and too_big.json()["error"]["param"] == "dimensions"
    finally:
        server.stop()


# --- on the GPU: the head runs inside the CUDA graphs (bf16 model, float32 head)

@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("pooling", ["max", ("cls", "weightedmean")])
def test_head_runs_inside_cuda_graphs(tmp_path, bert_dir, pooling):
    m = _modules()
    path = save_st_model(tmp_path / "st", bert_dir, pooling=pooling, after=_dense_stack(m), truncate_dim=12)
    texts = load_texts(40)
    reference = load_reference(path).encode(texts, convert_to_numpy=True)
    engine = Engine(EngineConfig(dtype="float32", model=str(path), max_batch_tokens=2048))
    assert engine.device.type == "cuda" and engine.runner.graphs is not None
    engine.warm_up()
    replays = engine.runner.num_graph_replays
    runs = [engine.embed(texts) for _ in range(3)]  # a new shape: eager, then captured, then replayed
    assert engine.runner.num_graph_replays > replays  # the batches replayed graphs, head included
    for ours in runs:
        assert ours.shape == reference.shape == (40, 12)
        assert _cosine(ours, reference).min() >= 0.999
    eager = Engine(EngineConfig(dtype="float32", model=str(path), max_batch_tokens=2048, enforce_eager=True)).embed(texts)
    assert _cosine(ours, eager).min() >= 0.9999
