"""How a checkpoint's files (and the flags) decide attention, pooling, quantisation,
Matryoshka sizes, the end token and the default prompt (engine/model_files/flavour.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rose_embed.engine.contract.config import ModelOverrides
from rose_embed.engine.model_files.loader import ModelLoadError, load_spec

QWEN3 = {"model_type": "qwen3", "hidden_size": 64, "max_position_embeddings": 512, "vocab_size": 100}


def _model(tmp_path: Path, config: dict, files: dict | None = None) -> str:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "tokenizer.json").write_text("{}")  # load_spec only checks that it exists
    for name, value in (files or {}).items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(json.dumps(value))
    return str(tmp_path)


def _st(pooling: str, quantizer: bool = False) -> dict:
    modules = [{"type": "sentence_transformers.models.Transformer", "path": ""},
               {"type": "sentence_transformers.models.Pooling", "path": "1_Pooling"}]
    if quantizer:
        modules.append({"type": "st_quantize.FlexibleQuantizer", "path": ""})
    return {"modules.json": modules, "1_Pooling/config.json": {f"pooling_mode_{pooling}": True}}


def test_qwen3_embedding_is_causal_last_token_float_only(tmp_path):
    spec = load_spec(_model(tmp_path, QWEN3, {**_st("lasttoken"), "config_sentence_transformers.json": {
        "prompts": {"query": "Instruct: x\nQuery:", "document": ""}, "default_prompt_name": None}}))
    assert (spec.architecture, spec.is_causal, spec.pooling) == ("qwen3", True, "last")
    assert spec.append_end_token and spec.normalize
    assert spec.quantization is None and spec.matryoshka_dims is None
    assert spec.prompts["query"] == "Instruct: x\nQuery:" and spec.default_prompt_name is None


def test_qwen3_without_sentence_transformers_files_defaults_to_last_token(tmp_path):
    spec = load_spec(_model(tmp_path, QWEN3))
    assert (spec.is_causal, spec.pooling, spec.append_end_token) == (True, "last", True)


def test_pplx_embed_is_bidirectional_mean_tanh_quantized(tmp_path):
    config = {**QWEN3, "model_type": "bidirectional_pplx_qwen3", "use_bidirectional_attention": True}
    spec = load_spec(_model(tmp_path, config, _st("mean_tokens", quantizer=True)))
    assert (spec.architecture, spec.is_causal, spec.pooling) == ("qwen3", False, "mean")
    assert spec.quantization == "tanh" and not spec.normalize and not spec.append_end_token


@pytest.mark.parametrize("flag", [{"use_bidirectional_attention": True}, {"is_causal": False}])
def test_bidirectional_config_flags_on_a_plain_qwen3(tmp_path, flag):
    spec = load_spec(_model(tmp_path, {**QWEN3, **flag}))
    assert (spec.is_causal, spec.pooling, spec.quantization) == (False, "mean", None)


def test_quantizer_module_alone_turns_quantization_on(tmp_path):
    spec = load_spec(_model(tmp_path, {**QWEN3, "is_causal": False}, _st("mean_tokens", quantizer=True)))
    assert spec.quantization == "tanh"


def test_overrides_win_over_the_checkpoint(tmp_path):
    config = {**QWEN3, "model_type": "bidirectional_pplx_qwen3", "matryoshka_dimensions": [32, 16]}
    path = _model(tmp_path, config, _st("mean_tokens", quantizer=True))
    assert load_spec(path).matryoshka_dims == (16, 32)
    spec = load_spec(path, overrides=ModelOverrides(attention="causal", pooling="last", quantization="none",
                                                   matryoshka_dims="8,48"))
    assert (spec.is_causal, spec.pooling, spec.quantization, spec.normalize) == (True, "last", None, True)
    assert spec.matryoshka_dims == (8, 48) and spec.append_end_token
    assert load_spec(path, overrides=ModelOverrides(matryoshka_dims="any")).matryoshka_dims is None
    assert load_spec(path, overrides=ModelOverrides(matryoshka_dims="none")).matryoshka_dims == ()


@pytest.mark.parametrize("overrides,message", [
    (ModelOverrides(matryoshka_dims="0,8"), "between 1 and 64"),
    (ModelOverrides(matryoshka_dims="128"), "between 1 and 64"),
    (ModelOverrides(matryoshka_dims="big"), "comma list"),
    (ModelOverrides(pooling="median"), "pooling must be one of"),
    (ModelOverrides(default_prompt_name="query"), "not among the model's prompts"),
])
def test_bad_overrides_fail_at_load(tmp_path, overrides, message):
    with pytest.raises(ModelLoadError, match=message):
        load_spec(_model(tmp_path, QWEN3), overrides=overrides)


def test_default_prompt_from_checkpoint_and_flag(tmp_path):
    st = {"config_sentence_transformers.json": {"prompts": {"query": "q: ", "passage": "p: "},
                                                "default_prompt_name": "passage"}}
    path = _model(tmp_path, QWEN3, st)
    assert load_spec(path).default_prompt_name == "passage"
    assert load_spec(path, overrides=ModelOverrides(default_prompt_name="query")).default_prompt_name == "query"
    assert load_spec(path, overrides=ModelOverrides(default_prompt_name="")).default_prompt_name is None


def test_bert_stays_a_normalised_mean_pooled_encoder(tmp_path):
    spec = load_spec(_model(tmp_path, {"model_type": "bert", "hidden_size": 32, "max_position_embeddings": 64}))
    assert (spec.architecture, spec.is_causal, spec.pooling, spec.quantization) == ("bert", False, "mean", None)
    assert spec.normalize and not spec.append_end_token and spec.matryoshka_dims is None


# jina-embeddings-v2's config.json: model_type bert, but its own code (ALiBi, no learned positions).
JINA_V2_AUTO_MAP = {"AutoConfig": "jinaai/jina-bert-implementation--configuration_bert.JinaBertConfig",
                    "AutoModel": "jinaai/jina-bert-implementation--modeling_bert.JinaBertModel",
                    "AutoModelForMaskedLM": "jinaai/jina-bert-implementation--modeling_bert.JinaBertForMaskedLM"}
BERT = {"model_type": "bert", "hidden_size": 32, "max_position_embeddings": 64}


@pytest.mark.parametrize("config,named", [
    ({**BERT, "auto_map": JINA_V2_AUTO_MAP}, "AutoModel at custom model code, jinaai/jina-bert-implementation--"
                                             "modeling_bert.JinaBertModel"),
    ({**QWEN3, "auto_map": {"AutoModelForCausalLM": "modeling_custom.MyQwen3ForCausalLM"}},
     "AutoModelForCausalLM at custom model code, modeling_custom.MyQwen3ForCausalLM"),
    # pplx-embed's known class, but under another model_type: not the checkpoint the engine knows.
    ({**QWEN3, "auto_map": {"AutoModel": "modeling.PPLXQwen3Model"}}, "modeling.PPLXQwen3Model"),
])
def test_custom_model_code_is_refused_by_its_class(tmp_path, config, named):
    with pytest.raises(ModelLoadError, match="auto_map") as raised:
        load_spec(_model(tmp_path, config))
    assert named in str(raised.value) and "PPLXQwen3Model (model_type bidirectional_pplx_qwen3)" in str(raised.value)


def test_known_custom_code_and_non_model_entries_load(tmp_path):
    pplx = {**QWEN3, "model_type": "bidirectional_pplx_qwen3",
            "auto_map": {"AutoConfig": "configuration.PPLXQwen3Config", "AutoModel": "modeling.PPLXQwen3Model"}}
    assert load_spec(_model(tmp_path / "pplx", pplx)).architecture == "qwen3"
    # A custom tokenizer or config class alone changes nothing the engine computes.
    tokenizer_only = {**BERT, "auto_map": {"AutoConfig": "configuration.MyConfig",
                                           "AutoTokenizer": ["tokenization.MyTokenizer", None]}}
    assert load_spec(_model(tmp_path / "bert", tokenizer_only)).architecture == "bert"


def test_unknown_model_type_is_refused_with_the_supported_ones(tmp_path):
    with pytest.raises(ModelLoadError, match=r"model_type 'nomic_bert' is not supported \(supported: .*distilbert"):
        load_spec(_model(tmp_path, {**BERT, "model_type": "nomic_bert"}))


@pytest.mark.parametrize("config,refusal", [
    ({**BERT, "hidden_act": "gelu_fast"}, "bert with hidden_act 'gelu_fast' is not supported"),
    ({**BERT, "model_type": "xlm-roberta", "hidden_act": "quick_gelu"},
     "xlm-roberta with hidden_act 'quick_gelu' is not supported"),
    ({"model_type": "distilbert", "dim": 32, "max_position_embeddings": 64, "activation": "silu"},
     "distilbert with activation 'silu' is not supported"),
    ({"model_type": "modernbert", "hidden_size": 32, "max_position_embeddings": 64, "hidden_activation": "relu"},
     "ModernBERT with hidden_activation 'relu' is not supported"),
    ({"model_type": "gemma3_text", "hidden_size": 32, "max_position_embeddings": 64, "attn_logit_softcapping": 50.0},
     "Gemma3 with attn_logit_softcapping is not supported"),
    ({**QWEN3, "hidden_act": "gelu"}, "Qwen3 with hidden_act 'gelu' is not supported"),
    ({**QWEN3, "use_sliding_window": True}, "Qwen3 with sliding-window attention is not supported"),
    ({"model_type": "mistral", "hidden_size": 64, "max_position_embeddings": 512, "hidden_act": "gelu"},
     "Mistral with hidden_act 'gelu' is not supported"),
])
def test_a_config_the_layers_do_not_compute_is_refused_before_anything_starts(tmp_path, config, refusal):
    """The model classes refuse these too (engine/model_files/architecture_support.py serves both), but only
    once an engine process builds one: load_spec, in the CLI, refuses them first."""
    with pytest.raises(ModelLoadError, match=refusal):
        load_spec(_model(tmp_path, config))
