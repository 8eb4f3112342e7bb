"""--quantization int8 on real and tiny checkpoints, on the CPU (docs/cpu-int8.md).

- Every architecture the engine serves, on the tiny checkpoints sentence-transformers saves
  (tests/models/test_architectures.py), int8 with the rest in bf16 against sentence-transformers' float32
  encode: min cosine >= 0.99 and mean >= 0.998 over every text (bf16 alone holds 0.998; int8's per-token
  rounding of random weights costs up to seven times bf16's error, EmbeddingGemma's the most).
  These run eagerly (oneDNN's VNNI kernel): the same integer products as the compiled path.
- The compiled path (inductor's GEMM template) on a tiny BERT: equal to the eager path within
  rounding, no oneDNN matmul (so no reference kernel), no compile after warm-up. Every family
  compiled was checked by hand (bench/results/cpu/README.md, "Built"); compiling each here would take minutes.
- The default model (all-MiniLM-L6-v2) against its float32 self on the shared workload's texts:
  the bar for int8, mean cosine >= 0.995, min >= 0.98, top-10 agreement >= 0.94.
- `rose-embed embed --dtype bfloat16 --quantization int8` writes those vectors and says its texts/s.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from rose_embed.engine.contract.config import EngineConfig
from rose_embed.engine.rose import cpu_features
from tests.conftest import load_texts
from tests.models.test_architectures import SPECS, corpus, cosines, texts  # noqa: F401  (fixtures)
from tests.models.test_fp8_quality import top10_agreement

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(cpu_features.int8_dot_products() is None,
                                 reason="needs a CPU with AVX512-VNNI or AMX-INT8")]

MIN_COSINE_TINY, MEAN_COSINE_TINY = 0.99, 0.998
# One architecture per model family the engine has (the RoBERTa-likes share BERT's code).
ARCHITECTURES = ("bert", "distilbert", "embeddinggemma", "mistral", "modernbert", "mpnet", "qwen3")


def _engine(path, **settings):
    from rose_embed.engine.rose.engine import Engine

    return Engine(EngineConfig(dtype="bfloat16", model=str(path), device="cpu", max_batch_tokens=2048,
                               quantization="int8", **settings))


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_every_architecture_in_int8_stays_within_its_tolerance(arch, texts, tmp_path):  # noqa: F811
    from sentence_transformers import SentenceTransformer

    path = SPECS[arch].save(tmp_path / "model")
    expected = SentenceTransformer(str(path), device="cpu").encode(texts, convert_to_numpy=True)
    engine = _engine(path, enforce_eager=True)
    assert any(type(m).__name__ == "Int8Linear" for m in engine.runner.model.modules())
    got = cosines(engine.embed(texts), expected)
    assert got.min() >= MIN_COSINE_TINY and got.mean() >= MEAN_COSINE_TINY, \
        f"{arch}: min cosine {got.min():.5f} at text {got.argmin()}, mean {got.mean():.5f}"


@pytest.fixture(scope="module")
def compiled_bert(tmp_path_factory):
    """(the compiled int8 engine, the eager one) on the tiny BERT checkpoint, warmed up."""
    path = SPECS["bert"].save(tmp_path_factory.mktemp("bert") / "model")
    compiled = _engine(path)
    compiled.warm_up()
    return compiled, _engine(path, enforce_eager=True)


def test_the_compiled_model_equals_the_eager_one(compiled_bert, texts):  # noqa: F811
    """The same integer products; only where a float32 step rounds (LayerNorm fused with the
    quantization instead of a bf16 tensor in between) can a value land on the next int8 step."""
    from rose_embed.engine.rose.quantization.int8_compile import CompiledInt8Model

    compiled, eager = compiled_bert
    assert isinstance(compiled.runner.model, CompiledInt8Model)
    got = cosines(compiled.embed(texts), eager.embed(texts))
    assert got.min() >= 0.999, f"min cosine {got.min():.5f} at text {got.argmin()}"


def test_the_compiled_model_compiles_nothing_after_warm_up_and_runs_no_reference_kernel(compiled_bert, capfd):
    from torch._dynamo.utils import counters

    compiled, _ = compiled_bert
    graphs = counters["stats"]["unique_graphs"]
    capfd.readouterr()
    with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):
        for num_texts in (1, 3, 17, 60):  # token counts the warm-up did not run
            compiled.embed(load_texts(num_texts))
    printed = capfd.readouterr().out
    one_token = compiled.execute([np.array([101], dtype=np.int32)]).wait()  # runs eagerly: no graph of its own
    assert counters["stats"]["unique_graphs"] == graphs
    assert np.isfinite(one_token).all() and one_token.shape[0] == 1
    # Every int8 product runs in inductor's GEMM template: oneDNN runs no matmul at all, so neither
    # its reference kernel (bench/results/cpu/README.md: the trap of inductor's SmoothQuant pattern).
    kernels = [line.split(",")[6] for line in printed.splitlines() if ",exec,cpu,matmul," in line]
    assert kernels == []


def test_the_default_model_in_int8_keeps_its_vectors_and_neighbours():
    from rose_embed.engine.rose.engine import Engine

    docs = load_texts(1200)
    passages = ["\n".join(docs[i:i + 4]) for i in range(0, 1000, 4)]
    queries = docs[1000:1200]
    reference = Engine(EngineConfig(device="cpu", dtype="float32"))
    int8 = Engine(EngineConfig(device="cpu", dtype="bfloat16", quantization="int8", enforce_eager=True))
    ours = int8.embed(passages), int8.embed(queries)
    theirs = reference.embed(passages), reference.embed(queries)
    got = np.concatenate([cosines(a, b) for a, b in zip(ours, theirs)])
    agreement = top10_agreement(ours[1], ours[0], theirs[1], theirs[0])
    print(f"int8, all-MiniLM-L6-v2: mean cosine {got.mean():.5f}, min {got.min():.5f}, top-10 {agreement:.3f}")
    assert got.mean() >= 0.995 and got.min() >= 0.98 and agreement >= 0.94


def test_the_embed_command_takes_dtype_and_int8_and_says_its_rate(tmp_path, capsys):
    from rose_embed.engine.rose.engine import Engine
    from rose_embed.server.cli.main import main

    texts = load_texts(120)
    (tmp_path / "in.jsonl").write_text("".join(f'{{"text": {json.dumps(t)}}}\n' for t in texts))
    main(["embed", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "out.npy"), "--devices", "cpu",
          "--dtype", "bfloat16", "--quantization", "int8", "--enforce-eager"])
    summary = capsys.readouterr().err.splitlines()[-1]
    assert summary.startswith(f"rose-embed embed: {len(texts)} texts -> ") and summary.endswith(" texts/s)"), summary
    expected = Engine(EngineConfig(device="cpu", dtype="float32")).embed(texts)
    assert cosines(np.load(tmp_path / "out.npy"), expected).min() >= 0.98
