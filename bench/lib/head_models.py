"""Random-weight checkpoints, one per head, for bench/heads.py: written the way the real ones ship, so
that the engine loads each through the path a server takes (Engine, head_for). The first four share one
BERT shape; BGE-M3 has its own backbone (XLM-R large), whose dense pass is its own baseline.

  dense       BertModel + the default model's sentence-transformers files (mean pooling, normalised):
              bench/tiny_model.py's write_tiny_bert
  sparse      BertForMaskedLM saved by save_pretrained into `{out}-hf`, then wrapped in
              SparseEncoder(MLMTransformer, SpladePooling) and saved by SparseEncoder.save, as
              tests/support/sparse_checkpoints.py saves its tiny ones; max pooling, SpladePooling's "relu"
              (log1p(relu(x)), naver's SPLADE), no max_active_dims, so every answer row holds
              MAX_UNCUT_DIMS slots
  classifier  BertForSequenceClassification of several labels (multi-label: a sigmoid per label)
  colbert     BertModel + Dense(hidden -> COLBERT_DIM, no bias) saved by sentence-transformers, with the
              "[Q] " / "[D] " prefix tokens added to the tokenizer and PyLate's keys written into
              config_sentence_transformers.json, as tests/support/colbert_checkpoints.py saves its tiny
              ones; document_length MAX_SEQ_LENGTH, so that no document is cut shorter than for dense
  bge-m3      XLMRobertaModel in BAAI/bge-m3's layout (Transformer + Pooling(cls) + Normalize, and the
              colbert_linear.pt / sparse_linear.pt state dicts beside them), as
              tests/support/bge_m3_checkpoints.py saves its tiny one; XLM-R's vocabulary size and
              BGE-M3's 8,192 tokens of context, with the source's (BERT) tokenizer: the benchmark's
              token ids are random anyway, and the check's texts only need some tokenizer

A random MLM head makes about half of the vocabulary's logits positive, where a trained SPLADE
model keeps tens to a few hundred dimensions of a passage: `calibrate_shift` lowers the head's output
bias so that the median text has `active_dims` non-zero values, measured on the benchmark's own
documents, and the JSON pairs weigh what a trained model's would.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import torch

from bench.tiny_model import write_tiny_bert

_TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"]
# sentence_bert_config's limit, also the longest document the benchmark sends
MAX_SEQ_LENGTH = 512

# name -> (hidden, layers, heads); the feed-forward is 4x hidden
SHAPES = {"minilm": (384, 6, 12), "bert-base": (768, 12, 12), "tiny": (32, 1, 1)}
# BGE-M3's backbones, as SHAPES: XLM-R large's, and a tiny one for a smoke run
M3_SHAPES = {"xlmr-large": (1024, 24, 16), "tiny": (32, 1, 1)}
COLBERT_DIM = 128  # the projection of ColBERTv2 and most PyLate models
COLBERT_QUERY_LENGTH = 32  # PyLate's default
XLMR_VOCAB_SIZE = 250_002
M3_MAX_SEQ_LENGTH = 8192  # BGE-M3's; positions hold two more (XLM-R's offset past the padding id)


def bert_config(source: Path, shape: str, **extra):
    """The default model's BertConfig (its vocabulary and positions) at `shape`'s sizes."""
    from transformers import BertConfig

    hidden, layers, heads = SHAPES[shape]
    base = json.loads((source / "config.json").read_text())
    return BertConfig(**{**base, "hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
                         "intermediate_size": 4 * hidden, **extra})


def _copy_tokenizer(source: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name in _TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copy(source / name, out / name)


def write_dense(out: Path, source: Path, shape: str) -> Path:
    """The default model's files at `shape`, its limit raised to MAX_SEQ_LENGTH as the other heads' (its own
    is shorter, which would cut the longer documents for the dense pass alone)."""
    hidden, layers, heads = SHAPES[shape]
    write_tiny_bert(out, hidden, layers, heads, source=source)
    settings = out / "sentence_bert_config.json"
    settings.write_text(json.dumps({**json.loads(settings.read_text()), "max_seq_length": MAX_SEQ_LENGTH}))
    return out


@torch.inference_mode()
def calibrate_shift(model, docs: list[np.ndarray], active_dims: int, device: str) -> float:
    """The amount to subtract from the MLM head's bias so that the median of `docs` keeps
    `active_dims` positive max-pooled logits (what SpladePooling turns into non-zero values)."""
    model = model.to(device).eval()
    kth = []
    for seq in docs:
        ids = torch.from_numpy(seq[:MAX_SEQ_LENGTH].astype(np.int64))[None].to(device)
        pooled = model(input_ids=ids).logits[0].float().amax(0)  # [V]
        kth.append(float(torch.topk(pooled, active_dims).values[-1]))
    model.to("cpu")
    return float(np.median(kth))


def write_sparse(out: Path, source: Path, shape: str, calibration_docs: list[np.ndarray], active_dims: int,
                 activation: str, device: str) -> Path:
    """A SPLADE SparseEncoder at `shape`, its logits lowered by calibrate_shift."""
    from sentence_transformers import SparseEncoder
    from sentence_transformers.sparse_encoder.modules import (
        MLMTransformer,
        SpladePooling,
    )
    from transformers import BertForMaskedLM

    hf_dir = out.parent / f"{out.name}-hf"
    torch.manual_seed(0)
    model = BertForMaskedLM(bert_config(source, shape))
    shift = calibrate_shift(model, calibration_docs, active_dims, device)
    with torch.no_grad():
        model.get_output_embeddings().bias -= shift
    model.save_pretrained(hf_dir, safe_serialization=True)
    _copy_tokenizer(source, hf_dir)
    modules = [MLMTransformer(str(hf_dir), max_seq_length=MAX_SEQ_LENGTH),
               SpladePooling(pooling_strategy="max", activation_function=activation)]
    SparseEncoder(modules=modules, device="cpu").save(str(out))
    return out


def write_classifier(out: Path, source: Path, shape: str, num_labels: int) -> Path:
    """A multi-label BertForSequenceClassification of `num_labels` labels (the engine's kind: classify)."""
    from transformers import BertForSequenceClassification

    labels = {i: f"label_{i}" for i in range(num_labels)}
    config = bert_config(source, shape, num_labels=num_labels, id2label=labels,
                         label2id={name: i for i, name in labels.items()},
                         problem_type="multi_label_classification",
                         architectures=["BertForSequenceClassification"])
    torch.manual_seed(0)
    BertForSequenceClassification(config).save_pretrained(out, safe_serialization=True)
    _copy_tokenizer(source, out)
    return out


def write_colbert(out: Path, source: Path, shape: str) -> Path:
    """A PyLate ColBERT at `shape`: documents keep their tokens up to MAX_SEQ_LENGTH; queries are expanded to
    COLBERT_QUERY_LENGTH with the [MASK] tokens attended to (the one expansion the engine computes)."""
    import string

    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Dense, Transformer
    from transformers import AutoTokenizer, BertModel

    hf_dir = out.parent / f"{out.name}-hf"
    _copy_tokenizer(source, hf_dir)
    tokenizer = AutoTokenizer.from_pretrained(hf_dir)
    tokenizer.add_tokens(["[Q] ", "[D] "])  # as ColBERT.__init__ adds its prefixes
    tokenizer.save_pretrained(hf_dir)
    torch.manual_seed(0)
    BertModel(bert_config(source, shape, vocab_size=len(tokenizer))).save_pretrained(hf_dir, safe_serialization=True)
    transformer = Transformer(str(hf_dir), max_seq_length=MAX_SEQ_LENGTH - 1)  # ColBERT.tokenize: room for the prefix
    dense = Dense(transformer.get_embedding_dimension(), COLBERT_DIM, bias=False,
                  activation_function=torch.nn.Identity())
    SentenceTransformer(modules=[transformer, dense], device="cpu").save(str(out))
    settings = out / "config_sentence_transformers.json"
    settings.write_text(json.dumps({
        **json.loads(settings.read_text()), "model_type": "ColBERT", "similarity_fn_name": "MaxSim",
        "query_prefix": "[Q] ", "document_prefix": "[D] ", "query_length": COLBERT_QUERY_LENGTH,
        "document_length": MAX_SEQ_LENGTH, "attend_to_expansion_tokens": True, "do_query_expansion": True,
        "skiplist_words": list(string.punctuation)}, indent=2))
    shutil.rmtree(hf_dir)
    return out


def write_bge_m3(out: Path, source: Path, shape: str) -> Path:
    """BGE-M3's files on an XLM-R of `shape` (M3_SHAPES), random weights."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import (
        Normalize,
        Pooling,
        Transformer,
    )
    from transformers import XLMRobertaConfig, XLMRobertaModel

    hidden, layers, heads = M3_SHAPES[shape]
    hf_dir = out.parent / f"{out.name}-hf"
    _copy_tokenizer(source, hf_dir)
    config = XLMRobertaConfig(vocab_size=XLMR_VOCAB_SIZE, max_position_embeddings=M3_MAX_SEQ_LENGTH + 2,
                              pad_token_id=1, bos_token_id=0, eos_token_id=2, type_vocab_size=1, layer_norm_eps=1e-5,
                              hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                              intermediate_size=4 * hidden)
    torch.manual_seed(0)
    XLMRobertaModel(config).save_pretrained(hf_dir, safe_serialization=True)
    transformer = Transformer(str(hf_dir), max_seq_length=M3_MAX_SEQ_LENGTH)
    modules = [transformer, Pooling(hidden, pooling_mode="cls"), Normalize()]
    SentenceTransformer(modules=modules, device="cpu").save(str(out))
    shutil.rmtree(hf_dir)
    # The two linears as EncoderOnlyEmbedderM3Model.save writes them: state dicts of torch.nn.Linear.
    generator = torch.Generator().manual_seed(1)
    for name, width in (("colbert_linear.pt", hidden), ("sparse_linear.pt", 1)):
        linear = torch.nn.Linear(hidden, width)
        with torch.no_grad():
            linear.weight.copy_(torch.randn(linear.weight.shape, generator=generator) / hidden ** 0.5)
            linear.bias.copy_(torch.randn(linear.bias.shape, generator=generator) * 0.1)
            if name == "sparse_linear.pt":
                # A deep random XLM-R gives its tokens nearly alike states: with a bias about 0 the one weight
                # per token can be below 0 for every token, relu leaves nothing, and the check proves nothing.
                linear.bias.fill_(1.0)
        torch.save(linear.state_dict(), out / name)
    return out
