"""Write a tiny BERT (1 layer, 32 wide, random weights) with the default model's tokenizer.

    python bench/tiny_model.py /tmp/tiny-bert [--hidden 32 --layers 1]
    python bench/tiny_model.py /tmp/bert-base-random --hidden 768 --layers 12   # BERT-base's shape

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

from engine.loader import resolve_model_dir  # noqa: E402

_COPIED = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt", "modules.json",
           "sentence_bert_config.json", "config_sentence_transformers.json"]


def write_tiny_bert(out: Path, hidden: int = 32, layers: int = 1, heads: int | None = None, seed: int = 0) -> Path:
    """heads defaults to hidden // 64 (BERT-base: 768 -> 12), at least 1."""
    import torch
    from transformers import BertConfig, BertModel

    source, _ = resolve_model_dir(None)
    base = json.loads((source / "config.json").read_text())
    config = BertConfig(**{**base, "hidden_size": hidden, "num_hidden_layers": layers,
                           "num_attention_heads": heads or max(1, hidden // 64), "intermediate_size": 4 * hidden})
    torch.manual_seed(seed)
    BertModel(config).save_pretrained(out, safe_serialization=True)
    for name in _COPIED:
        if (source / name).is_file():
            shutil.copy(source / name, out / name)
    (out / "1_Pooling").mkdir(exist_ok=True)
    pooling = json.loads((source / "1_Pooling" / "config.json").read_text())
    (out / "1_Pooling" / "config.json").write_text(json.dumps({**pooling, "word_embedding_dimension": hidden}))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--heads", type=int, default=None, help="default hidden // 64")
    args = parser.parse_args()
    print(write_tiny_bert(args.out, args.hidden, args.layers, args.heads))


if __name__ == "__main__":
    main()
