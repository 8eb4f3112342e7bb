"""Vector -> wire: float lists, base64 of little-endian float32, Matryoshka truncation."""

from __future__ import annotations

import base64

import numpy as np

ENCODING_FORMATS = ("float", "base64")


def truncate_dimensions(vectors: np.ndarray, dimensions: int | None) -> np.ndarray:
    """[N, D] -> [N, dimensions], re-normalised to unit length (OpenAI's `dimensions`)."""
    if dimensions is None or dimensions == vectors.shape[1]:
        return vectors
    cut = vectors[:, :dimensions]
    norms = np.linalg.norm(cut, axis=1, keepdims=True)
    return cut / np.maximum(norms, 1e-12)


def encode_vector(vector: np.ndarray, encoding_format: str) -> list[float] | str:
    if encoding_format == "base64":
        return base64.b64encode(vector.astype("<f4", copy=False).tobytes()).decode("ascii")
    return vector.tolist()
