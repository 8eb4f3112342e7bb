"""Reranker scores on CPU in fp32 against their references, within 1e-4.

Cross-encoders (BERT, XLM-R, ModernBERT; tiny, random, saved by CrossEncoder.save) against
`CrossEncoder(path).predict` on the same directory: the default activation (sigmoid) and the
raw logits. A tiny Qwen3 reranker against Qwen3-Reranker's model card computed with
transformers (tests/support/reranker_checkpoints.py). The documents include ones long enough that
the pair is truncated, and whitespace that byte-level tokenizers keep.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.conftest import load_texts
from tests.support.reranker_checkpoints import CROSS_ENCODERS, qwen3_card_scores, save_cross_encoder, save_qwen3_reranker

pytestmark = pytest.mark.slow  # loads engines

TOLERANCE = 1e-4


def _pairs() -> tuple[str, list[str]]:
    texts = load_texts(40)
    return texts[0][:300], [*texts[1:25], "", "  spaced   text  ", texts[5] * 4]


def _engine_scores(path, query: str, documents: list[str], max_doc_tokens: int | None = None):
    from rose_embed.engine.contract.config import EngineConfig
    from rose_embed.engine.rose.engine import Engine

    engine = Engine(EngineConfig(dtype="float32", model=str(path), device="cpu"))
    pairs = engine.pairs.encode(query, documents, max_doc_tokens)
    return np.asarray(engine.execute(pairs.seqs).wait()), pairs


@pytest.mark.parametrize("name", sorted(CROSS_ENCODERS))
def test_cross_encoder_scores_equal_crossencoder_predict(tmp_path, name):
    from sentence_transformers import CrossEncoder

    path = save_cross_encoder(tmp_path / name, name)
    query, documents = _pairs()
    scores, pairs = _engine_scores(path, query, documents)
    reference = CrossEncoder(str(path), device="cpu")
    expected = reference.predict([(query, d) for d in documents])
    raw = reference.predict([(query, d) for d in documents], activation_fn=torch.nn.Identity())
    assert pairs.truncated, "no pair reached the limit: truncation went untested"
    assert np.ptp(expected) > 0.05, "the scores hardly differ: a mixed-up pair could go unnoticed"
    np.testing.assert_allclose(scores[:, 0], expected, atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(scores[:, 1], raw, atol=TOLERANCE, rtol=0)


def test_bert_cross_encoder_whose_tokenizer_gives_no_token_types(tmp_path):
    """A tokenizer_config.json whose model_input_names leave out token_type_ids: transformers then
    runs the document's tokens with the first token type, and so must the engine."""
    import json

    from sentence_transformers import CrossEncoder

    path = save_cross_encoder(tmp_path / "bert", "bert")
    config_file = path / "tokenizer_config.json"
    config = json.loads(config_file.read_text())
    config_file.write_text(json.dumps({**config, "model_input_names": ["input_ids", "attention_mask"]}))
    query, documents = _pairs()
    scores, _ = _engine_scores(path, query, documents)
    expected = CrossEncoder(str(path), device="cpu").predict([(query, d) for d in documents])
    np.testing.assert_allclose(scores[:, 0], expected, atol=TOLERANCE, rtol=0)


def test_max_doc_tokens_cuts_each_document_before_pairing(tmp_path):
    """BERT's pair with each document cut to its first 12 tokens: [CLS] query [SEP] doc[:12] [SEP],
    the document's ids marked with the second token type."""
    from rose_embed.engine.model_files.loader import load_spec
    from rose_embed.engine.text.pairs import PairTokenizer
    from tokenizers import Tokenizer

    path = save_cross_encoder(tmp_path / "bert", "bert")
    query, documents = _pairs()
    spec = load_spec(str(path))
    tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    query_ids = tokenizer.encode(query, add_special_tokens=False).ids
    cls, sep, offset = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]"), spec.hf_config["vocab_size"]
    pairs = PairTokenizer(spec).encode(query, documents, max_doc_tokens=12)
    assert not pairs.truncated
    for document, seq in zip(documents, pairs.seqs):
        doc_ids = tokenizer.encode(document, add_special_tokens=False).ids[:12]
        assert seq.tolist() == [cls, *query_ids, sep, *(i + offset for i in [*doc_ids, sep])]


@pytest.mark.parametrize("marked", [True, False], ids=["config_sentence_transformers", "kind flag"])
def test_qwen3_reranker_scores_equal_the_model_card(tmp_path, marked):
    from rose_embed.engine.contract.config import EngineConfig, ModelOverrides
    from rose_embed.engine.rose.engine import Engine

    path = save_qwen3_reranker(tmp_path / "qwen3", marked=marked)
    query, documents = _pairs()
    overrides = ModelOverrides(kind=None if marked else "rerank")
    engine = Engine(EngineConfig(dtype="float32", model=str(path), device="cpu", model_overrides=overrides))
    pairs = engine.pairs.encode(query, documents)
    scores = np.asarray(engine.execute(pairs.seqs).wait())
    expected = qwen3_card_scores(path, query, documents, engine.spec.max_seq_len)
    assert pairs.truncated and np.ptp(expected) > 0.05
    np.testing.assert_allclose(scores[:, 0], expected, atol=TOLERANCE, rtol=0)


def test_a_reranker_embeds_nothing(tmp_path):
    """Its rows are pair scores, never a text's vector: the library and the corpus CLI refuse it by
    name, and the CLI before it writes anything."""
    import json

    from rose_embed.engine.contract.config import EngineConfig
    from rose_embed.engine.rose.engine import Engine
    from rose_embed.server.cli.main import main

    path = save_cross_encoder(tmp_path / "ranker", "bert")
    with pytest.raises(ValueError, match="is a reranker"):
        Engine(EngineConfig(dtype="float32", model=str(path), device="cpu")).embed(["a text"])
    source, output = tmp_path / "in.jsonl", tmp_path / "out.npy"
    source.write_text(json.dumps({"text": "a text"}) + "\n")
    with pytest.raises(SystemExit, match=r"rose-embed embed: .* is a reranker"):
        main(["embed", str(source), "-o", str(output), "--model", str(path), "--quiet"])
    assert not output.exists()
