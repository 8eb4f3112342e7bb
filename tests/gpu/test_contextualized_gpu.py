"""Late chunking on CUDA: bf16, CUDA graphs (the default), varlen attention, against the same
computation on Hugging Face transformers' AutoModel in fp32 (tests/support/late_chunking_reference.py).

Self-contained, as tests/gpu/test_architectures_gpu.py: each test builds its tiny checkpoint (saved
by sentence-transformers) in a temporary directory and drives an in-process Engine, so it needs
no HTTP libraries. Tolerances (cosine per vector): bf16 vs the fp32 reference >= 0.999; graph
replay vs the eager run of the same padded shapes >= 0.99999; graphs vs --enforce-eager >= 0.9999.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.conftest import load_texts
from tests.support.late_chunking_reference import hf_late_chunked, sentences

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

MAX_SEQ_LEN = 128


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.fixture(scope="module")
def documents() -> list[list[str]]:
    """1 to 3 windows each; one document of 40 one-sentence chunks, so that a window pools far
    more vectors than a batch has sequences; a single chunk."""
    texts = load_texts(120)
    docs = [sentences(" ".join(texts[lo:hi])) for lo, hi in ((0, 3), (3, 7), (10, 16), (30, 40))]
    docs.append([f"item {i}." for i in range(40)])
    docs.append(["a single short chunk"])
    return docs


@pytest.fixture(scope="module")
def bert_path(tmp_path_factory):
    from sentence_transformers.sentence_transformer import modules
    from transformers import BertConfig

    from tests.support.st_checkpoints import bert_tokenizer, save_architecture

    def config(vocab_size: int):
        # head_dim 64: a size both varlen and FlashInfer run
        return BertConfig(vocab_size=vocab_size, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                          num_attention_heads=4, max_position_embeddings=512)

    return save_architecture(tmp_path_factory.mktemp("late-gpu") / "bert-mean", bert_tokenizer, config,
                             pooling="mean", max_seq_length=MAX_SEQ_LEN,
                             after=[lambda width: modules.Dense(width, 48), modules.Normalize()])


def _engine(path, **overrides):
    from rose_embed.engine.contract.config import EngineConfig
    from rose_embed.engine.rose.engine import Engine

    return Engine(EngineConfig(model=str(path), device="cuda", **{"max_batch_tokens": 1024, "max_batch_seqs": 64,
                                                                  **overrides}))


def _late_chunked(engine, documents: list[list[str]]) -> np.ndarray:
    from rose_embed.engine.rose.pipeline import embed_stream

    [(_, vectors)] = embed_stream(engine, [(None, documents)], late_chunking=True, num_threads=0)
    return vectors


@pytest.mark.parametrize("backend", ["varlen", "flashinfer"])
def test_bf16_graphs_late_chunk_as_transformers_does(bert_path, documents, backend):
    from rose_embed.engine.rose.attention.cuda import flashinfer_available

    if backend == "flashinfer" and not flashinfer_available():
        pytest.skip("flashinfer is not installed")
    reference, _, num_windows = hf_late_chunked(bert_path, documents, MAX_SEQ_LEN)
    assert max(num_windows) >= 2  # what the documents are for
    engine = _engine(bert_path, attention_backend=backend)
    assert engine.dtype == torch.bfloat16 and engine.runner.graphs is not None
    engine.warm_up()
    replays = engine.runner.num_graph_replays
    # Each bucket's first batch runs eagerly on the padded shapes, its second is captured, later ones replay.
    runs = [_late_chunked(engine, documents) for _ in range(2 * engine.runner.graphs.num_slots + 1)]
    assert engine.runner.num_graph_replays > replays
    for out in runs:
        assert out.shape == reference.shape
        assert _cosines(out, reference).min() >= 0.999
    assert _cosines(runs[-1], runs[0]).min() >= 0.99999
    eager = _late_chunked(_engine(bert_path, attention_backend=backend, enforce_eager=True), documents)
    assert _cosines(eager, reference).min() >= 0.999
    assert _cosines(runs[-1], eager).min() >= 0.9999


def test_a_batch_of_ordinary_texts_and_late_chunked_windows_in_one_graph(bert_path, documents):
    """One packed batch: texts pooled whole beside windows pooled per chunk, more vectors than
    sequences, through the graph of its bucket; each part equals its own reference."""
    from rose_embed.engine.contract.batch import pack
    from rose_embed.engine.text.late_chunking import fit_documents
    from tests.support.st_checkpoints import load_reference

    engine = _engine(bert_path, max_batch_tokens=2048, max_batch_seqs=128)
    engine.warm_up()
    texts = load_texts(12)
    fitted = fit_documents(engine.tokenizer, "truncate", documents, "", engine.config.max_batch_seqs)
    text_seqs = engine.tokenize(texts)
    seqs = [*text_seqs[:6], *fitted.seqs, *text_seqs[6:]]
    segments = [None] * 6 + fitted.segments + [None] * 6
    batch = pack(seqs, segments)
    assert batch.num_outputs > 2 * batch.num_seqs and batch.num_tokens <= engine.config.max_batch_tokens
    layout = engine.runner.graphs.layout(batch.num_tokens, batch.num_seqs, batch.max_seqlen, batch.num_outputs)
    assert layout is not None and layout[1] >= batch.num_outputs
    replays = engine.runner.num_graph_replays
    runs = [engine.execute_packed(batch).wait().copy() for _ in range(2 * engine.runner.graphs.num_slots + 1)]
    assert engine.runner.num_graph_replays - replays >= engine.runner.graphs.num_slots + 1  # the last runs replay
    num_segments = fitted.chunk_of.shape[0]
    expected_texts = load_reference(bert_path).encode(texts, convert_to_numpy=True)
    reference, _, _ = hf_late_chunked(bert_path, documents, MAX_SEQ_LEN)
    for out in runs:
        assert out.shape == (12 + num_segments, 48)
        chunks = fitted.combine(out[6: 6 + num_segments], engine.spec.normalize)
        assert _cosines(np.concatenate([out[:6], out[6 + num_segments:]]), expected_texts).min() >= 0.999
        assert _cosines(chunks, reference).min() >= 0.999
    assert _cosines(runs[-1], runs[0]).min() >= 0.99999


def test_pplx_style_model_late_chunks_in_bf16(tmp_path, documents):
    """A bidirectional Qwen3 under pplx-embed's model_type (mean pooling, raw quantisable vectors;
    the tokenizer only appends <|endoftext|>)."""
    from tests.support.qwen3_checkpoints import tiny_config
    from tests.support.st_checkpoints import pplx_config, qwen_tokenizer, save_hf_model, save_st_model

    hf = tmp_path / "hf"
    hf.mkdir()
    save_hf_model(hf, pplx_config(hf, tiny_config(qwen_tokenizer(hf))), trust_remote_code=True)
    path = save_st_model(tmp_path / "st", hf, pooling="mean", trust_remote_code=True, max_seq_length=MAX_SEQ_LEN)
    engine = _engine(path)
    assert (engine.spec.is_causal, engine.spec.quantization) == (False, "tanh")
    engine.warm_up()
    reference, _, _ = hf_late_chunked(path, documents, MAX_SEQ_LEN, trust_remote_code=True)
    runs = [_late_chunked(engine, documents) for _ in range(3)]
    for out in runs:
        assert _cosines(out, reference).min() >= 0.999
