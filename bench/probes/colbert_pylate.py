"""Probe: does the engine give PyLate's own ColBERT vectors and MaxSim scores? (not in CI)

PyLate cannot be installed beside the test environment, so the tests compare with a transcription of
its encode path (tests/support/colbert_checkpoints.py). This probe checks that transcription against
PyLate itself, in two steps and two environments:

    python3 -m venv /tmp/pylate-venv && /tmp/pylate-venv/bin/pip install torch pylate
    /tmp/pylate-venv/bin/python bench/probes/colbert_pylate.py make OUT TOKENIZER_DIR [false]
    python bench/probes/colbert_pylate.py check OUT          # in the project's environment

`make` builds a tiny random BERT (the tokenizer's files from TOKENIZER_DIR, e.g. the default model's
folder), wraps it in `pylate.models.ColBERT` (which adds the [Q] / [D] tokens and the Dense
projection), saves it with `ColBERT.save` into OUT/model, and writes `ColBERT.encode` of the texts
in query and document mode and `colbert_scores` of the queries against the documents into OUT/pylate.npz;
with `attend_to_expansion_tokens` true, or false (PyLate's default: the [MASK]s hidden as keys) where
the last argument says so.
`check` loads OUT/model in the engine (CPU, float32) and prints the largest differences.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

TEXTS = ["How do I read a file?", "Open it, then loop over its lines!", "Paris is the capital of France.",
         "", "A longer document: " + "tokens, punctuation; and words " * 12]
LENGTHS = {"query_length": 12, "document_length": 40}


def make(out: Path, tokenizer_dir: Path, attend: bool = True) -> None:
    import numpy as np
    import torch
    from pylate import models, scores
    from transformers import BertConfig, BertModel

    hf_dir = out / "bert"
    hf_dir.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(tokenizer_dir / name, hf_dir / name)
    torch.manual_seed(0)
    vocab_size = len(json.loads((hf_dir / "tokenizer.json").read_text())["model"]["vocab"])
    BertModel(BertConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4)).save_pretrained(hf_dir)
    model = models.ColBERT(str(hf_dir), embedding_size=16, attend_to_expansion_tokens=attend, device="cpu",
                           **LENGTHS)
    model.save(str(out / "model"))
    model = models.ColBERT(str(out / "model"), device="cpu")  # as a user loads it
    queries = model.encode(TEXTS, is_query=True, convert_to_numpy=True)
    documents = model.encode(TEXTS, is_query=False, convert_to_numpy=True)
    # Pair by pair, unpadded: a padding row's dot product of 0 would beat a document's negative ones, and
    # older PyLate's colbert_scores takes no mask.
    maxsim = torch.tensor([[float(scores.colbert_scores(torch.from_numpy(q)[None], torch.from_numpy(d)[None]))
                            for d in documents] for q in queries])
    arrays = {f"query_{i}": q for i, q in enumerate(queries)} | {f"document_{i}": d for i, d in enumerate(documents)}
    np.savez(out / "pylate.npz", scores=maxsim.numpy(), **arrays)
    print(f"saved {out / 'model'} and PyLate's vectors and scores")


def check(out: Path) -> None:
    import numpy as np

    from rose_embed.engine.contract.batch import pack
    from rose_embed.engine.contract.config import EngineConfig
    from rose_embed.engine.rose.engine import Engine

    engine = Engine(EngineConfig(model=str(out / "model"), device="cpu", dtype="float32"))
    theirs = np.load(out / "pylate.npz")
    ours = {}
    for side in ("query", "document"):
        seqs, segments = engine.colbert.encode(TEXTS, side == "query")
        rows = engine.execute_packed(pack(seqs, segments)).wait()
        counts = [int(ids.max()) + 1 for ids in segments]
        ours[side] = np.split(rows, np.cumsum(counts)[:-1])
        worst = 0.0
        for i, vectors in enumerate(ours[side]):
            expected = theirs[f"{side}_{i}"]
            assert vectors.shape == expected.shape, f"{side} {i}: {vectors.shape} against PyLate's {expected.shape}"
            worst = max(worst, float(np.abs(vectors - expected).max()))
        print(f"{side} vectors: same counts as PyLate, largest difference {worst:.2e}")
    scores = np.array([[float((q @ d.T).max(axis=1).sum()) for d in ours["document"]] for q in ours["query"]])
    print(f"MaxSim scores: largest difference from colbert_scores {np.abs(scores - theirs['scores']).max():.2e}")


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(Path(sys.argv[2]), Path(sys.argv[3]), attend=sys.argv[4:] != ["false"])
    else:
        check(Path(sys.argv[2]))
