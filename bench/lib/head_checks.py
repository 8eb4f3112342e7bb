"""Each head's answers on a few texts against its reference library in float32 on the same device,
eager: a fast head that is wrong counts for nothing, so bench/heads.py stops when one fails.

  dense       SentenceTransformer.encode           error: 1 - the lowest cosine
  sparse      SparseEncoder.encode (SPLADE)        error: the largest absolute difference over [N, V]
  classifier  AutoModelForSequenceClassification   error: the largest absolute difference over
              (a sigmoid per label: multi-label)          [probabilities | logits]
  colbert     PyLate's ColBERT.encode, documents      error: 1 - the lowest cosine over every token vector
              and queries                                (and the same vectors per text)
  bge-m3      FlagEmbedding's BGEM3FlagModel.encode   dense and colbert: 1 - the lowest cosine; sparse:
              (dense, lexical weights, colbert)          the largest absolute difference over [N, V]

PyLate and FlagEmbedding cannot be installed beside this environment's libraries: their references are
the transcriptions the tests compare the server with (tests/support/colbert_checkpoints.py, checked
against PyLate by bench/probes/colbert_pylate.py; tests/support/bge_m3_checkpoints.py, against
FlagEmbedding by bench/probes/bge_m3_flagembedding.py), run on sentence-transformers' and transformers'
own modules.

The bar is the larger of a floor per dtype and REFERENCE_ERROR_FACTOR times the reference's own
error when it runs in the engine's dtype (tests/gpu/test_sparse_gpu.py's rule): a bf16 engine may be
as far from float32 as bf16 itself takes the library, with room, but no further. The floors are the
GPU tests' (tests/gpu/test_gpu.py: cosine 0.999 in bf16; tests/gpu/test_sparse_gpu.py: 0.02).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from rose_embed.engine.contract.sparse_rows import read_rows

REFERENCE_ERROR_FACTOR = 3
# dtype -> the floor per metric (cosine: 1 - cosine; absolute: a value's difference)
FLOORS = {torch.float32: {"cosine": 1e-5, "absolute": 1e-3}, torch.bfloat16: {"cosine": 1e-3, "absolute": 0.02},
          torch.float16: {"cosine": 1e-3, "absolute": 0.02}}
METRICS = {"dense": "cosine", "sparse": "absolute", "classifier": "absolute"}


class HeadMismatch(RuntimeError):
    """A head's answers are further from their reference than the bar."""


@dataclass(frozen=True)
class CheckResult:
    head: str
    metric: str
    error: float
    bar: float
    num_texts: int


def _reference(head: str, path: str, texts: list[str], device: str, dtype: torch.dtype) -> np.ndarray:
    """The library's answers in the engine's output layout: dense [N, D], sparse [N, V] (dense),
    classifier [N, 2L] (probabilities, then logits)."""
    if head == "dense":
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(path, device=device, model_kwargs={"dtype": dtype})
        return model.encode(texts, convert_to_numpy=True).astype(np.float64)
    if head == "sparse":
        from sentence_transformers import SparseEncoder

        model = SparseEncoder(path, device=device, model_kwargs={"dtype": dtype})
        return model.encode(texts).to_dense().double().cpu().numpy()
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path, dtype=dtype).to(device).eval()
    batch = tokenizer(texts, padding=True, truncation=True, max_length=512, return_tensors="pt").to(device)
    with torch.inference_mode():
        logits = model(**batch).logits.double()
    return torch.cat([torch.sigmoid(logits), logits], dim=1).cpu().numpy()


def as_answers(head: str, rows: np.ndarray, vocab_size: int | None = None) -> np.ndarray:
    """The engine's rows in the reference's layout (a sparse row's pairs spread over [V])."""
    if head != "sparse":
        return rows.astype(np.float64)
    out = np.zeros((len(rows), vocab_size))
    for dense, row in zip(out, read_rows(rows)):
        dense[row.indices] = row.values
    return out


def error(metric: str, got: np.ndarray, want: np.ndarray) -> float:
    if metric == "cosine":
        norms = np.maximum(np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1), 1e-30)
        return float(1 - ((got * want).sum(1) / norms).min())
    return float(np.abs(got - want).max())


def compare(name: str, metric: str, got: np.ndarray, reference: Callable[[torch.dtype], np.ndarray],
            dtype: torch.dtype, num_texts: int) -> CheckResult:
    """got against reference(float32); the bar from reference(dtype) where the engine's dtype is not float32.
    HeadMismatch past the bar, for answers of another shape, or for a reference of zeros alone."""
    want = reference(torch.float32)
    if not np.any(want):
        raise HeadMismatch(f"{name}: the reference answers are all zero; the check would prove nothing")
    if got.shape != want.shape:
        raise HeadMismatch(f"{name}: the engine's answers are {got.shape}, the reference's {want.shape}")
    bar = FLOORS[dtype][metric]
    if dtype != torch.float32:
        bar = max(bar, REFERENCE_ERROR_FACTOR * error(metric, reference(dtype), want))
    found = error(metric, got, want)
    if not found <= bar:  # also catches NaN
        raise HeadMismatch(f"{name}: {metric} error {found:.3g} against the float32 reference exceeds {bar:.3g}")
    return CheckResult(name, metric, found, bar, num_texts)


def check_head(head: str, path: str, texts: list[str], got: np.ndarray, device: str,
               dtype: torch.dtype) -> CheckResult:
    """got: the engine's answers for `texts` in the reference's layout; HeadMismatch past the bar."""
    return compare(head, METRICS[head], got, lambda d: _reference(head, path, texts, device, d), dtype, len(texts))


def check_colbert(path: Path, texts: list[str], documents: list[np.ndarray], queries: list[np.ndarray], device: str,
                  dtype: torch.dtype) -> list[CheckResult]:
    """The engine's token vectors per text, as documents and as queries, against PyLate's encode."""
    from tests.support.colbert_checkpoints import reference_vectors

    def side(is_query: bool, got: list[np.ndarray]) -> CheckResult:
        name = f"colbert {'queries' if is_query else 'documents'}"
        counts = [len(v) for v in reference_vectors(path, texts, is_query, device)]
        if counts != [len(v) for v in got]:
            raise HeadMismatch(f"{name}: {[len(v) for v in got]} vectors per text, PyLate keeps {counts}")
        return compare(name, "cosine", np.concatenate(got).astype(np.float64),
                       lambda d: np.concatenate(reference_vectors(path, texts, is_query, device, d)).astype(np.float64),
                       dtype, len(texts))

    return [side(False, documents), side(True, queries)]


def check_bge_m3(path: Path, texts: list[str], dense: np.ndarray, colbert: list[np.ndarray],
                 sparse: list[tuple[np.ndarray, np.ndarray]], max_length: int, vocab_size: int, device: str,
                 dtype: torch.dtype) -> list[CheckResult]:
    """The engine's three outputs per text against BGEM3FlagModel.encode's: dense [N, H], colbert [tokens - 1, D]
    per text, sparse (ids, weights) per text."""
    from tests.support.bge_m3_checkpoints import as_pairs, reference_outputs

    references: dict[torch.dtype, dict] = {}

    def outputs(d: torch.dtype) -> dict:
        if d not in references:
            references[d] = reference_outputs(path, texts, max_length=max_length, device=device, dtype=d)
        return references[d]

    def spread(pairs: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
        out = np.zeros((len(pairs), vocab_size))
        for row, (ids, weights) in zip(out, pairs):
            row[ids] = weights
        return out

    counts = [len(v) for v in outputs(torch.float32)["colbert_vecs"]]
    if counts != [len(v) for v in colbert]:
        raise HeadMismatch(f"bge-m3 colbert: {[len(v) for v in colbert]} vectors per text, FlagEmbedding's {counts}")
    return [
        compare("bge-m3 dense", "cosine", dense.astype(np.float64),
                lambda d: np.stack(outputs(d)["dense_vecs"]).astype(np.float64), dtype, len(texts)),
        compare("bge-m3 sparse", "absolute", spread(sparse),
                lambda d: spread([as_pairs(w) for w in outputs(d)["lexical_weights"]]), dtype, len(texts)),
        compare("bge-m3 colbert", "cosine", np.concatenate(colbert).astype(np.float64),
                lambda d: np.concatenate(outputs(d)["colbert_vecs"]).astype(np.float64), dtype, len(texts)),
    ]
