"""`long_inputs: chunk` on the engine, CPU (fp32) and CUDA (bf16, CUDA graphs, the defaults),
against the cookbook computation on sentence-transformers' own modules: each text's tokens cut
into windows that fill the model's limit, each wrapped in [CLS] ... [SEP] and run through the
checkpoint's modules (Transformer, mean Pooling, Dense, Normalize), the window vectors
averaged weighted by the text tokens each holds, then normalised.

The checkpoint is tests/gpu/test_contextualized_gpu.py's: tiny, random, saved by
sentence-transformers with a Dense module after pooling, so that the combination is checked
after the whole head. Tolerances (cosine per vector): fp32 on
the CPU >= 0.99999; bf16 on CUDA >= 0.999, and graph replay vs --enforce-eager >= 0.9998.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.support.chunk_reference import window_by_window
from tests.conftest import load_texts
from tests.models.test_architectures import cosines
from tests.gpu.test_contextualized_gpu import MAX_SEQ_LEN, bert_path  # noqa: F401 (a fixture)

pytestmark = pytest.mark.slow  # sentence-transformers and a checkpoint it saves


@pytest.fixture(scope="module")
def texts() -> list[str]:
    """Over the limit by 1x to 4x, a short text, and a paragraph that fits in one window."""
    paragraphs = load_texts(80)
    return ["\n\n".join(paragraphs[0:6]), "a short text", "\n\n".join(paragraphs[10:30]), paragraphs[40],
            "\n\n".join(paragraphs[50:58])]


@torch.inference_mode()
def _reference(path, texts: list[str]) -> np.ndarray:
    from tests.support.st_checkpoints import load_reference

    model = load_reference(path)

    def window_vector(ids: torch.Tensor) -> np.ndarray:
        features = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids)}
        return model(features)["sentence_embedding"][0].double().numpy()

    return window_by_window(model.tokenizer, texts, MAX_SEQ_LEN - 2, window_vector)


def _chunked(engine, texts: list[str]) -> np.ndarray:
    from rose_embed.engine.rose.pipeline import embed_stream

    [(_, vectors)] = embed_stream(engine, [(None, texts)], long_inputs="chunk", num_threads=0, num_processes=0)
    return vectors


def _engine(path, device: str, **overrides):
    from rose_embed.engine.contract.config import EngineConfig
    from rose_embed.engine.rose.engine import Engine

    overrides.setdefault("dtype", "float32" if device == "cpu" else "auto")  # the CPU's exact path
    return Engine(EngineConfig(model=str(path), device=device, max_batch_tokens=1024, **overrides))


def test_chunk_mode_on_the_cpu_matches_sentence_transformers_window_by_window(bert_path, texts):
    reference = _reference(bert_path, texts)
    engine = _engine(bert_path, "cpu")
    assert len(engine.tokenize(texts[2:3])[0]) == MAX_SEQ_LEN  # truncated there: windows are what is tested
    ours = _chunked(engine, texts)
    assert ours.shape == reference.shape
    assert cosines(ours, reference).min() >= 0.99999
    truncated = engine.embed(texts)
    assert cosines(truncated, reference)[[0, 2, 4]].max() < 0.9999  # the windows after the first count


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_chunk_mode_on_cuda_in_bf16_with_graphs_matches_sentence_transformers(bert_path, texts):
    reference = _reference(bert_path, texts)
    engine = _engine(bert_path, "cuda")
    assert engine.dtype == torch.bfloat16 and engine.runner.graphs is not None
    engine.warm_up()
    replays = engine.runner.num_graph_replays
    # Each bucket's first batch runs eagerly on the padded shapes, its second is captured, later ones replay.
    runs = [_chunked(engine, texts) for _ in range(3)]
    assert engine.runner.num_graph_replays > replays
    for out in runs:
        assert out.shape == reference.shape
        assert cosines(out, reference).min() >= 0.999
    eager = _chunked(_engine(bert_path, "cuda", enforce_eager=True), texts)
    assert cosines(eager, reference).min() >= 0.999
    assert cosines(runs[-1], eager).min() >= 0.9998
