"""How far bf16 is from fp32 for one of the test architectures: sentence-transformers' own bf16
against ours, on the same tiny checkpoint (tests/test_architectures.py builds it). A GPU test
that misses its bf16 tolerance is a bug of ours only if sentence-transformers' bf16 does better.

    python3 bench/bf16_floor.py embeddinggemma gemma3   # on a CUDA machine
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.config import EngineConfig  # noqa: E402
from engine.rose.engine import Engine  # noqa: E402
from tests.conftest import load_texts  # noqa: E402
from tests.test_architectures import SPECS, cosines  # noqa: E402


def main(archs: list[str]) -> None:
    from sentence_transformers import SentenceTransformer

    corpus = load_texts(300)
    texts = ["x", "  Return the sum.\n", *corpus[:40], *["\n\n".join(corpus[i:i + 12]) for i in range(100, 160, 12)]]
    for arch in archs:
        path = str(SPECS[arch].save(Path(tempfile.mkdtemp()) / "model"))
        reference = SentenceTransformer(path, device="cpu").encode(texts, convert_to_numpy=True)
        st_bf16 = SentenceTransformer(path, device="cuda", model_kwargs={"dtype": torch.bfloat16}).encode(
            texts, convert_to_numpy=True)
        ours = Engine(EngineConfig(model=path, device="cuda", max_batch_tokens=2048)).embed(texts)
        # fp32 on the GPU: varlen (FlashAttention) takes only half precision, sdpa any.
        ours_fp32 = Engine(EngineConfig(model=path, device="cuda", dtype="float32", attention_backend="sdpa",
                                        max_batch_tokens=2048, enforce_eager=True)).embed(texts)
        print(f"{arch}: min cosine against fp32 sentence-transformers: sentence-transformers bf16 "
              f"{cosines(st_bf16, reference).min():.5f}, ours bf16 {cosines(ours, reference).min():.5f}, "
              f"ours fp32 {cosines(ours_fp32, reference).min():.6f}")


if __name__ == "__main__":
    main(sys.argv[1:] or ["embeddinggemma"])
