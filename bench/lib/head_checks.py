"""Each head's answers on a few texts against its reference library in float32 on the same device,
eager: a fast head that is wrong counts for nothing, so bench/heads.py stops when one fails.

  dense       SentenceTransformer.encode           error: 1 - the lowest cosine
  sparse      SparseEncoder.encode (SPLADE)        error: the largest absolute difference over [N, V]
  classifier  AutoModelForSequenceClassification   error: the largest absolute difference over
              (a sigmoid per label: multi-label)          [probabilities | logits]

The bar is the larger of a floor per dtype and REFERENCE_ERROR_FACTOR times the reference's own
error when it runs in the engine's dtype (tests/gpu/test_sparse_gpu.py's rule): a bf16 engine may be
as far from float32 as bf16 itself takes the library, with room, but no further. The floors are the
GPU tests' (tests/gpu/test_gpu.py: cosine 0.999 in bf16; tests/gpu/test_sparse_gpu.py: 0.02).
"""

from __future__ import annotations

from dataclasses import dataclass

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


def check_head(head: str, path: str, texts: list[str], got: np.ndarray, device: str,
               dtype: torch.dtype) -> CheckResult:
    """got: the engine's answers for `texts` in the reference's layout; HeadMismatch past the bar."""
    metric = METRICS[head]
    want = _reference(head, path, texts, device, torch.float32)
    if not np.any(want):
        raise HeadMismatch(f"{head}: the reference answers are all zero; the check would prove nothing")
    bar = FLOORS[dtype][metric]
    if dtype != torch.float32:
        own = error(metric, _reference(head, path, texts, device, dtype), want)
        bar = max(bar, REFERENCE_ERROR_FACTOR * own)
    found = error(metric, got, want)
    if not found <= bar:  # also catches NaN
        raise HeadMismatch(f"{head}: {metric} error {found:.3g} against the float32 reference exceeds {bar:.3g}")
    return CheckResult(head, metric, found, bar, len(texts))
