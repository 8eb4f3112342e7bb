"""Tiny random sparse encoders (SPLADE) saved by sentence-transformers itself, and their reference.

`save_sparse_encoder` builds a tiny `*ForMaskedLM` with random weights far from their init
(tests/support/qwen3_checkpoints.py's randomize), wraps it in
`SparseEncoder(modules=[MLMTransformer, SpladePooling])` and saves it with `SparseEncoder.save`,
so the files are the ones the installed sentence-transformers writes. A random MLM head makes
about half of the vocabulary's logits positive, where a trained SPLADE model makes a few dozen:
its output bias is lowered (`sparsity_shift`) so that a text has tens to hundreds of non-zero
values, as a trained model's has. `save_inference_free` saves the same kind of MLM as the document
route of an inference-free encoder's Router, its query route a SparseStaticEmbedding of random
weights (a tenth of them 0). `reference_pairs` is `SparseEncoder(path).encode`'s sparse tensor (for
a `task`, "query" or "document", where given) read as each text's (indices, values).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from tests.support.qwen3_checkpoints import randomize
from tests.support.st_checkpoints import bert_tokenizer, xlmr_tokenizer

if TYPE_CHECKING:  # transformers takes seconds to import: the functions that build a model import it
    from transformers import PretrainedConfig

_SIZES = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}
# The Transformer module's limit: short enough that the shared workload's longer paragraphs are cut.
MAX_SEQ_LENGTH = 128


def _bert(vocab_size: int) -> PretrainedConfig:
    from transformers import BertConfig

    return BertConfig(vocab_size=vocab_size, max_position_embeddings=512, **_SIZES)


def _distilbert(vocab_size: int) -> PretrainedConfig:
    from transformers import DistilBertConfig

    return DistilBertConfig(vocab_size=vocab_size, dim=32, hidden_dim=64, n_layers=2, n_heads=4,
                            max_position_embeddings=512)


def _xlmr(vocab_size: int) -> PretrainedConfig:
    from transformers import XLMRobertaConfig

    return XLMRobertaConfig(vocab_size=vocab_size, max_position_embeddings=514, pad_token_id=1, bos_token_id=0,
                            eos_token_id=2, **_SIZES)


# name -> (tokenizer writer, config of a vocabulary size, how far the MLM head's logits are lowered:
# about 1 in 10,000 of a token's logits stays positive in a vocabulary of 30k, 1 in 50 of 600)
MLM_MODELS: dict[str, tuple[Callable[[Path], int], Callable[[int], PretrainedConfig], float]] = {
    "bert": (bert_tokenizer, _bert, 3.5),
    "distilbert": (bert_tokenizer, _distilbert, 3.5),
    "xlm-roberta": (xlmr_tokenizer, _xlmr, 2.0),
}


def _lower_logits(model: torch.nn.Module, shift: float) -> None:
    """Subtract `shift` from the MLM head's output bias (every *ForMaskedLM's decoder bias)."""
    decoder = model.get_output_embeddings()
    with torch.no_grad():
        decoder.bias -= shift


def _save_mlm(hf_dir: Path, name: str, sparsity_shift: float | None, seed: int) -> None:
    from transformers import AutoModelForMaskedLM

    tokenizer, config_of, default_shift = MLM_MODELS[name]
    hf_dir.mkdir(parents=True, exist_ok=True)
    config = config_of(tokenizer(hf_dir))
    torch.manual_seed(seed)
    model = AutoModelForMaskedLM.from_config(config)
    randomize(model, seed)
    _lower_logits(model, default_shift if sparsity_shift is None else sparsity_shift)
    model.save_pretrained(hf_dir)


def save_sparse_encoder(path: Path, name: str = "bert", *, pooling: str = "max", activation: str = "relu",
                        max_active_dims: int | None = None, sparsity_shift: float | None = None,
                        seed: int = 0) -> Path:
    """A random `name` MLM saved the Hugging Face way into `{path}-hf`, then as a SparseEncoder of
    SpladePooling(`pooling`, `activation`) by SparseEncoder.save into `path`. `sparsity_shift`: how far
    the head's logits are lowered (default: the model's, MLM_MODELS; 0 leaves half of them positive)."""
    from sentence_transformers import SparseEncoder
    from sentence_transformers.sparse_encoder.modules import MLMTransformer, SpladePooling

    hf_dir = path.parent / f"{path.name}-hf"
    _save_mlm(hf_dir, name, sparsity_shift, seed)
    modules = [MLMTransformer(str(hf_dir), max_seq_length=MAX_SEQ_LENGTH),
               SpladePooling(pooling_strategy=pooling, activation_function=activation)]
    SparseEncoder(modules=modules, max_active_dims=max_active_dims, device="cpu").save(str(path))
    return path


def save_inference_free(path: Path, *, seed: int = 0) -> Path:
    """An inference-free encoder: a Router whose query route is a SparseStaticEmbedding of random weights
    and whose document route is a random BERT MLM with SpladePooling, saved by SparseEncoder.save."""
    from sentence_transformers import SparseEncoder
    from sentence_transformers.sparse_encoder.modules import MLMTransformer, Router, SparseStaticEmbedding, SpladePooling
    from transformers import AutoTokenizer

    hf_dir = path.parent / f"{path.name}-hf"
    _save_mlm(hf_dir, "bert", None, seed)
    tokenizer = AutoTokenizer.from_pretrained(hf_dir)
    gen = torch.Generator().manual_seed(seed)
    weight = torch.rand(len(tokenizer.get_vocab()), generator=gen) * 3
    weight[torch.rand(weight.shape, generator=gen) < 0.1] = 0  # tokens a query's vector leaves out
    router = Router.for_query_document(
        query_modules=[SparseStaticEmbedding(tokenizer=tokenizer, weight=weight, frozen=True)],
        document_modules=[MLMTransformer(str(hf_dir), max_seq_length=MAX_SEQ_LENGTH), SpladePooling()])
    SparseEncoder(modules=[router], device="cpu").save(str(path))
    return path


def reference_pairs(path: Path, texts: list[str], **encode_options) -> list[tuple[np.ndarray, np.ndarray]]:
    """SparseEncoder(path).encode(texts) in float32 on the CPU, as each text's (indices ascending, values)."""
    from sentence_transformers import SparseEncoder

    encoded = SparseEncoder(str(path), device="cpu").encode(texts, **encode_options).coalesce()
    rows, columns = encoded.indices().numpy()
    values = encoded.values().numpy()
    return [(columns[rows == i], values[rows == i]) for i in range(len(texts))]
