"""Probe: does the engine give FlagEmbedding's own BGE-M3 outputs? (not in CI)

FlagEmbedding pulls in many packages, so the tests compare with a transcription of its encode path
(tests/support/bge_m3_checkpoints.py). This probe checks that transcription against FlagEmbedding
itself, in three steps and two environments:

    python -m bench.probes.bge_m3_flagembedding make OUT                 # in the project's environment
    python3 -m venv /tmp/fe && /tmp/fe/bin/pip install FlagEmbedding
    /tmp/fe/bin/python bench/probes/bge_m3_flagembedding.py flag OUT
    python -m bench.probes.bge_m3_flagembedding check OUT                # in the project's environment

`make` saves a tiny random XLM-R in BAAI/bge-m3's layout into OUT/model (tests/support/bge_m3_checkpoints.py's
save_bge_m3: transformers' save, sentence-transformers' CLS + Normalize, torch.save of the two linears).
`flag` writes `BGEM3FlagModel(OUT/model, use_fp16=False).encode(TEXTS, return_dense=True, return_sparse=True,
return_colbert_vecs=True)` into OUT/flag.npz. `check` computes the same texts in the engine (CPU, float32)
and prints the largest differences of each output.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

TEXTS = ["How do I read a file?", "Open it, then loop over its lines!", "Paris is the capital of France.", "",
         "A longer document: " + "tokens, punctuation; and words " * 12]
MAX_LENGTH = 128


def make(out: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.support.bge_m3_checkpoints import save_bge_m3

    save_bge_m3(out / "model", max_seq_length=MAX_LENGTH)
    print(f"saved {out / 'model'}")


def flag(out: Path) -> None:
    import numpy as np
    from FlagEmbedding import BGEM3FlagModel

    model = BGEM3FlagModel(str(out / "model"), use_fp16=False, devices="cpu")
    got = model.encode(TEXTS, max_length=MAX_LENGTH, return_dense=True, return_sparse=True,
                       return_colbert_vecs=True)
    arrays = {"dense": np.asarray(got["dense_vecs"], dtype=np.float32)}
    arrays |= {f"colbert_{i}": np.asarray(v, dtype=np.float32) for i, v in enumerate(got["colbert_vecs"])}
    np.savez(out / "flag.npz", **arrays)
    lexical = [{k: float(v) for k, v in weights.items()} for weights in got["lexical_weights"]]
    (out / "flag_lexical.json").write_text(json.dumps(lexical))
    print(f"saved FlagEmbedding's outputs into {out}")


def check(out: Path) -> None:
    import numpy as np

    from rose_embed.engine.contract import m3_rows
    from rose_embed.engine.contract.batch import pack
    from rose_embed.engine.contract.config import EngineConfig
    from rose_embed.engine.rose.engine import Engine

    engine = Engine(EngineConfig(model=str(out / "model"), device="cpu", dtype="float32"))
    m3 = engine.spec.m3
    theirs = np.load(out / "flag.npz")
    lexical = json.loads((out / "flag_lexical.json").read_text())
    seqs = engine.tokenize(TEXTS)
    rows = engine.execute_packed(pack(seqs, [m3_rows.token_segments(seq) for seq in seqs])).wait()
    per_text = np.split(rows, np.cumsum([len(seq) for seq in seqs])[:-1])
    dense = np.stack([m3_rows.dense_vectors(text_rows[:1], m3.dense_dim)[0] for text_rows in per_text])
    print(f"dense: largest difference {np.abs(dense - theirs['dense']).max():.2e}")
    worst_colbert = worst_sparse = 0.0
    for i, (seq, text_rows) in enumerate(zip(seqs, per_text)):
        colbert = m3_rows.colbert_vectors(text_rows, m3.colbert_dim)
        expected = theirs[f"colbert_{i}"]
        assert colbert.shape == expected.shape, f"text {i}: {colbert.shape} against FlagEmbedding's {expected.shape}"
        worst_colbert = max(worst_colbert, float(np.abs(colbert - expected).max()))
        ids, weights = m3_rows.lexical_weights(seq, text_rows, m3.unused_ids)
        assert sorted(int(k) for k in lexical[i]) == ids.tolist(), f"text {i}: other token ids than FlagEmbedding's"
        if len(ids):
            worst_sparse = max(worst_sparse, float(np.abs(weights - [lexical[i][str(k)] for k in ids]).max()))
    print(f"colbert: same counts as FlagEmbedding, largest difference {worst_colbert:.2e}")
    print(f"sparse: same token ids as FlagEmbedding, largest difference {worst_sparse:.2e}")


if __name__ == "__main__":
    step, folder = sys.argv[1], Path(sys.argv[2])
    {"make": make, "flag": flag, "check": check}[step](folder)
