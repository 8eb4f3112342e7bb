"""Which checkpoints are sparse encoders, how each is computed and which are refused by name
(engine/model_files/sparse.py), read from config files alone; the answer rows' layout read back
(engine/contract/sparse_rows.py); and the sparse head against its formula written out, padding
tokens and chunks of tokens included (engine/rose/layers/sparse_head.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from rose_embed.engine.contract.config import ModelOverrides
from rose_embed.engine.contract.sparse_rows import read_rows, row_width
from rose_embed.engine.model_files.loader import ModelLoadError, load_spec
from rose_embed.engine.model_files.sparse import MAX_UNCUT_DIMS, SparseModel
from rose_embed.engine.rose.layers.sparse_head import SparseHead

BERT = {"model_type": "bert", "hidden_size": 8, "max_position_embeddings": 512, "vocab_size": 40,
        "architectures": ["BertForMaskedLM"], "hidden_act": "gelu", "layer_norm_eps": 1e-12}
MLM = {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.sparse_encoder.modules.mlm_transformer."
       "MLMTransformer"}
SPLADE = {"idx": 1, "name": "1", "path": "1_SpladePooling",
          "type": "sentence_transformers.sparse_encoder.modules.splade_pooling.SpladePooling"}
FILL_MASK = {"transformer_task": "fill-mask", "max_seq_length": 128,
             "modality_config": {"text": {"method": "forward", "method_output_name": "logits"}}}


def _model(path: Path, modules: list[dict], pooling: dict | None = None, st: dict | None = None,
           config: dict | None = None, transformer: dict | None = None) -> str:
    path.mkdir(parents=True, exist_ok=True)
    files = {"config.json": config or BERT, "tokenizer.json": {}, "modules.json": modules,
             "config_sentence_transformers.json": {"model_type": "SparseEncoder", **(st or {})},
             "sentence_bert_config.json": transformer or FILL_MASK,
             "1_SpladePooling/config.json": pooling or {"pooling_strategy": "max", "activation_function": "relu"}}
    for name, value in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(json.dumps(value))
    return str(path)


def test_mlm_and_splade_pooling_make_a_sparse_encoder(tmp_path):
    spec = load_spec(_model(tmp_path, [MLM, SPLADE], {"pooling_strategy": "sum", "activation_function": "log1p_relu"}))
    assert spec.sparse == SparseModel("bert", "sum", "log1p_relu", 40, None)
    assert not spec.is_reranker and spec.max_seq_len == 128
    assert spec.embedding_dim == row_width(min(40, MAX_UNCUT_DIMS))  # a vocabulary smaller than the cap: all of it


def test_transformer_with_fill_mask_and_a_top_k(tmp_path):
    transformer = {**MLM, "type": "sentence_transformers.base.modules.transformer.Transformer"}
    path = _model(tmp_path, [transformer, SPLADE], st={"max_active_dims": 5})
    assert load_spec(path).sparse.num_slots == 5
    assert load_spec(path, overrides=ModelOverrides(max_active_dims=3)).embedding_dim == row_width(3)


@pytest.mark.parametrize("name,modules,files,words", [
    ("router", [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.base.modules.router.Router"}], {},
     "Router"),
    ("autoencoder", [MLM, {**SPLADE, "type": "sentence_transformers.sparse_encoder.modules.sparse_auto_encoder."
                                             "SparseAutoEncoder"}], {}, "SparseAutoEncoder"),
    ("a module after the pooling", [MLM, SPLADE, {"idx": 2, "name": "2", "path": "",
                                                  "type": "sentence_transformers.base.modules.dense.Dense"}], {},
     "Dense"),
    ("another pooling", [MLM, SPLADE], {"pooling": {"pooling_strategy": "mean"}}, "'mean'"),
    ("another activation", [MLM, SPLADE], {"pooling": {"activation_function": "gelu"}}, "'gelu'"),
    ("another architecture", [MLM, SPLADE], {"config": {**BERT, "model_type": "mpnet"}}, "'mpnet'"),
    ("feature extraction", [MLM, SPLADE], {"transformer": {"transformer_task": "feature-extraction"}},
     "feature-extraction"),
    ("a top-k of none", [MLM, SPLADE], {"st": {"max_active_dims": 0}}, "max_active_dims"),
])
def test_what_cannot_be_computed_exactly_is_refused_by_name(tmp_path, name, modules, files, words):
    with pytest.raises(ModelLoadError, match=words):
        load_spec(_model(tmp_path, modules, **files))


ROUTER = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.base.modules.router.Router"}]
STATIC = "sentence_transformers.sparse_encoder.modules.sparse_static_embedding.SparseStaticEmbedding"


def _router(path: Path, query: list[tuple[str, str]], parameters: dict | None = None) -> str:
    """An inference-free layout: the document route's model in its folder, `query` (folder, type) as given."""
    document = [("document_0_MLMTransformer", MLM["type"]), ("document_1_SpladePooling", SPLADE["type"])]
    _model(path / "document_0_MLMTransformer", [])
    (path / "document_1_SpladePooling").mkdir()
    (path / "document_1_SpladePooling" / "config.json").write_text(json.dumps({"pooling_strategy": "max"}))
    router = {"types": dict(document + query), "structure": {"query": [f for f, _ in query],
                                                              "document": [f for f, _ in document]},
              "parameters": {"default_route": "document", **(parameters or {})}}
    files = {"modules.json": ROUTER, "router_config.json": router,
             "config_sentence_transformers.json": {"model_type": "SparseEncoder"}}
    for name, value in files.items():
        (path / name).write_text(json.dumps(value))
    return str(path)


def test_an_inference_free_router_serves_its_document_model(tmp_path):
    spec = load_spec(_router(tmp_path, [("query_0_SparseStaticEmbedding", STATIC)]))
    assert spec.path == tmp_path / "document_0_MLMTransformer" and spec.name == tmp_path.name
    assert spec.sparse.queries.folder == tmp_path / "query_0_SparseStaticEmbedding"
    assert (spec.sparse.default_route, spec.max_seq_len) == ("document", 128)


@pytest.mark.parametrize("query,parameters,words", [
    ([("query_0_MLMTransformer", MLM["type"])], {}, "query route"),
    ([("query_0_SparseStaticEmbedding", STATIC)], {"route_mappings": {"x": "query"}}, "route_mappings"),
    ([("query_0_SparseStaticEmbedding", STATIC)], {"default_route": "passage"}, "default_route"),
])
def test_other_routers_are_refused_by_name(tmp_path, query, parameters, words):
    with pytest.raises(ModelLoadError, match=words):
        load_spec(_router(tmp_path, query, parameters))


def test_rows_read_back_ascending_with_their_count():
    rows = np.zeros((3, row_width(3)), np.float32)
    rows[0, :7] = [2, 17, 4, 0, 0.5, 0.25, 0]  # two non-zeros, largest first
    rows[1, :7] = [9, 3, 1, 2, 0.9, 0.8, 0.7]  # nine, three kept
    read = read_rows(rows)
    assert read[0].indices.tolist() == [4, 17] and read[0].values.tolist() == [0.25, 0.5] and not read[0].is_cut
    assert read[1].indices.tolist() == [1, 2, 3] and read[1].num_active == 9 and read[1].is_cut
    assert read[2].indices.tolist() == [] and not read[2].is_cut


def _mlm_state(hidden: int, vocab: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return {"cls.predictions.transform.dense.weight": torch.randn(hidden, hidden, generator=gen),
            "cls.predictions.transform.dense.bias": torch.randn(hidden, generator=gen) * 0.1,
            "cls.predictions.transform.LayerNorm.weight": 1 + 0.1 * torch.randn(hidden, generator=gen),
            "cls.predictions.transform.LayerNorm.bias": 0.1 * torch.randn(hidden, generator=gen),
            "bert.embeddings.word_embeddings.weight": torch.randn(vocab, hidden, generator=gen),
            "cls.predictions.bias": torch.randn(vocab, generator=gen) - 2}


@pytest.mark.parametrize("pooling,activation", [("max", "relu"), ("sum", "log1p_relu")])
def test_head_equals_its_formula_over_segments_padding_and_chunks(pooling, activation):
    state = _mlm_state(8, 40)
    head = SparseHead(SparseModel("bert", pooling, activation, 40, None), BERT, state).eval()
    head.chunk_tokens = 3  # several chunks, one segment across two of them
    hidden = torch.randn(11, 8, generator=torch.Generator().manual_seed(1))
    segment_ids = torch.tensor([0, 0, 0, 0, 1, 1, 2, 2, 2, -1, -1])  # the last two tokens pad
    with torch.inference_mode():
        rows = read_rows(head(hidden, segment_ids, 3).numpy())
    with torch.no_grad():
        x = torch.nn.functional.gelu(hidden @ state["cls.predictions.transform.dense.weight"].T
                                     + state["cls.predictions.transform.dense.bias"])
        x = torch.nn.functional.layer_norm(x, (8,), state["cls.predictions.transform.LayerNorm.weight"],
                                           state["cls.predictions.transform.LayerNorm.bias"], 1e-12)
        values = torch.log1p(torch.relu(x @ state["bert.embeddings.word_embeddings.weight"].T
                                        + state["cls.predictions.bias"]))
        if activation == "log1p_relu":
            values = torch.log1p(values)
    for row, (lo, hi) in zip(rows, [(0, 4), (4, 6), (6, 9)]):
        pooled = values[lo:hi].amax(0) if pooling == "max" else values[lo:hi].sum(0)
        assert row.indices.tolist() == torch.nonzero(pooled).flatten().tolist()
        np.testing.assert_allclose(row.values, pooled[row.indices].numpy(), atol=1e-4, rtol=0)
    assert 0 < min(len(row.indices) for row in rows) and max(len(row.indices) for row in rows) < 40
