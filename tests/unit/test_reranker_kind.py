"""Which checkpoints are rerankers, how each is scored, and which are refused by name
(engine/model_files/reranker.py), read from config files alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rose_embed.engine.contract.config import ModelOverrides
from rose_embed.engine.model_files.loader import ModelLoadError, load_spec
from tests.support.qwen3_checkpoints import train_tokenizer
from tests.conftest import load_texts

BERT = {"model_type": "bert", "hidden_size": 32, "max_position_embeddings": 512, "vocab_size": 100,
        "type_vocab_size": 2, "architectures": ["BertForSequenceClassification"], "id2label": {"0": "LABEL_0"}}
CROSS_ENCODER_ST = {"model_type": "CrossEncoder", "activation_fn": "torch.nn.modules.activation.Sigmoid"}
QWEN3 = {"model_type": "qwen3", "hidden_size": 64, "max_position_embeddings": 40960, "vocab_size": 600,
         "architectures": ["Qwen3ForCausalLM"]}


def _model(path: Path, config: dict, files: dict | None = None, tokenizer: str = "{}") -> str:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    (path / "tokenizer.json").write_text(tokenizer)
    for name, value in (files or {}).items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(json.dumps(value))
    return str(path)


def test_one_label_classifier_is_a_reranker_with_sigmoid(tmp_path):
    spec = load_spec(_model(tmp_path, BERT))
    assert spec.is_reranker and spec.reranker.head == "bert_pooler" and spec.reranker.activation == "Sigmoid"
    assert (spec.pooling, spec.embedding_dim, spec.normalize, spec.is_causal) == ("cls", 2, False, False)


def test_cross_encoder_save_names_its_activation(tmp_path):
    st = {**CROSS_ENCODER_ST, "activation_fn": "torch.nn.modules.linear.Identity"}
    spec = load_spec(_model(tmp_path, BERT, {"config_sentence_transformers.json": st}))
    assert spec.reranker.activation == "Identity"


@pytest.mark.parametrize("model_type,head", [("xlm-roberta", "roberta_head"), ("roberta", "roberta_head")])
def test_roberta_family_heads(tmp_path, model_type, head):
    config = {**BERT, "model_type": model_type, "architectures": ["XLMRobertaForSequenceClassification"],
              "type_vocab_size": 1}
    assert load_spec(_model(tmp_path, config)).reranker.head == head


def test_modernbert_head_reads_pooling_and_activation(tmp_path):
    config = {"model_type": "modernbert", "hidden_size": 32, "max_position_embeddings": 512, "vocab_size": 100,
              "architectures": ["ModernBertForSequenceClassification"], "num_labels": 1,
              "classifier_pooling": "mean", "classifier_activation": "gelu"}
    reranker = load_spec(_model(tmp_path, config)).reranker
    assert (reranker.head, reranker.pooling, reranker.classifier_activation) == ("modernbert_head", "mean", "gelu")


def test_several_labels_are_a_classifier_marked_a_cross_encoder_or_not_and_no_reranker_by_flag(tmp_path):
    config = {**BERT, "id2label": {"0": "no", "1": "yes"}}
    assert load_spec(_model(tmp_path / "plain", config)).kind == "classify"
    assert load_spec(_model(tmp_path / "marked", config, {"config_sentence_transformers.json": CROSS_ENCODER_ST})
                     ).kind == "classify"
    with pytest.raises(ModelLoadError, match="2 labels.*--model-kind classify"):
        load_spec(_model(tmp_path / "flag", config), overrides=ModelOverrides(kind="rerank"))


def test_kind_override_turns_a_cross_encoder_into_its_backbone_embedder(tmp_path):
    spec = load_spec(_model(tmp_path, BERT), overrides=ModelOverrides(kind="embed"))
    assert not spec.is_reranker and spec.embedding_dim == 32


REFUSED = [
    ("distilbert", {**BERT, "model_type": "distilbert", "architectures": ["DistilBertForSequenceClassification"],
                    "dim": 32}, None, "DistilBertForSequenceClassification cross-encoders are not supported"),
    ("custom activation", BERT, {**CROSS_ENCODER_ST, "activation_fn": "my_package.Temperature"},
     "activation_fn 'my_package.Temperature' is not supported"),
    ("a plain embedder named a reranker", {**BERT, "architectures": ["BertModel"]}, CROSS_ENCODER_ST,
     "'BertModel' is named a reranker"),
    ("modernbert activation", {"model_type": "modernbert", "hidden_size": 32, "vocab_size": 100, "num_labels": 1,
                               "architectures": ["ModernBertForSequenceClassification"],
                               "classifier_activation": "mish"}, None, "classifier_activation 'mish'"),
]


@pytest.mark.parametrize("name,config,st,message", REFUSED, ids=[r[0] for r in REFUSED])
def test_rerankers_that_cannot_be_served_exactly_are_refused_by_name(tmp_path, name, config, st, message):
    files = {"config_sentence_transformers.json": st} if st else None
    with pytest.raises(ModelLoadError, match=message):
        load_spec(_model(tmp_path, config, files))


def test_modules_after_a_cross_encoders_transformer_are_refused(tmp_path):
    modules = [{"type": "sentence_transformers.base.modules.transformer.Transformer", "path": ""},
               {"type": "sentence_transformers.base.modules.dense.Dense", "path": "1_Dense"}]
    with pytest.raises(ModelLoadError, match="modules after its Transformer"):
        load_spec(_model(tmp_path, BERT, {"modules.json": modules, "config_sentence_transformers.json": CROSS_ENCODER_ST}))


@pytest.fixture(scope="module")
def qwen_tokenizer_json() -> str:
    tok = train_tokenizer(load_texts(200))
    tok.add_tokens(["yes", "no"])
    return tok.to_str()


def test_qwen3_causal_lm_is_a_reranker_by_flag_or_cross_encoder_file(tmp_path, qwen_tokenizer_json):
    assert not load_spec(_model(tmp_path / "plain", QWEN3, tokenizer=qwen_tokenizer_json)).is_reranker
    by_flag = load_spec(_model(tmp_path / "flag", QWEN3, tokenizer=qwen_tokenizer_json),
                        overrides=ModelOverrides(kind="rerank"))
    by_file = load_spec(_model(tmp_path / "file", QWEN3, {"config_sentence_transformers.json": {
        "model_type": "CrossEncoder"}}, tokenizer=qwen_tokenizer_json))
    for spec in (by_flag, by_file):
        reranker = spec.reranker
        assert (reranker.head, reranker.pooling, spec.is_causal, spec.append_end_token) == ("yes_no", "last", True,
                                                                                             False)
        vocab = json.loads(qwen_tokenizer_json)["added_tokens"]
        ids = {token["content"]: token["id"] for token in vocab}
        assert (reranker.yes_id, reranker.no_id) == (ids["yes"], ids["no"])
        assert spec.max_seq_len == 8192  # the model card's max_length, below the model's own 40960


def test_qwen3_reranker_without_yes_and_no_tokens_is_refused(tmp_path):
    tokenizer = train_tokenizer(load_texts(50), vocab_size=300).to_str()
    vocab = json.loads(tokenizer)["model"]["vocab"]
    if "yes" in vocab or "no" in vocab:
        pytest.fail("the small tokenizer was meant to lack 'yes' and 'no'")
    with pytest.raises(ModelLoadError, match="'yes' and 'no'"):
        load_spec(_model(tmp_path, QWEN3, tokenizer=tokenizer), overrides=ModelOverrides(kind="rerank"))


def test_unknown_kind_is_refused(tmp_path):
    with pytest.raises(ModelLoadError, match="model kind must be one of embed, rerank, classify"):
        load_spec(_model(tmp_path, BERT), overrides=ModelOverrides(kind="score"))
