"""Vectors -> wire: float lists, base64, Matryoshka truncation, quantised formats.

The engine hands back one float32 vector per input: unit length for most models, the
raw pooled vector for a quantising model (pplx-embed), whose int8 output depends on
the raw scale. `encode_embeddings` turns a request's vectors into what its
`encoding_format` and `dimensions` ask for; float output is always unit length.
"""

from __future__ import annotations

import base64

import numpy as np

from rose_embed.compat.quantize import int8_tanh, packed_sign_bits
from rose_embed.compat.vector_wire import encode_vectors

ENCODING_FORMATS = ("float", "base64")
# Where the model defines quantisation (spec.quantization == "tanh"). The names of the
# integer lists are sentence-transformers' precisions; the base64 names are Perplexity's.
#   int8 / base64_int8   round(127 * tanh(x)) as int8
#   uint8                the same + 128, as 1..255
#   binary               sign bits (x >= 0) packed to bytes, each byte - 128 (int8)
#   ubinary / base64_binary  the packed sign-bit bytes as they are (uint8)
QUANTIZED_FORMATS = ("int8", "uint8", "binary", "ubinary", "base64_int8", "base64_binary")


def encoding_formats(quantization: str | None) -> tuple[str, ...]:
    """The `encoding_format` values a model with this quantization can produce."""
    return ENCODING_FORMATS + (QUANTIZED_FORMATS if quantization == "tanh" else ())


def _normalize(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


def truncate_dimensions(vectors: np.ndarray, dimensions: int | None) -> np.ndarray:
    """[N, D] -> [N, dimensions], re-normalised to unit length (OpenAI's `dimensions`)."""
    if dimensions is None or dimensions == vectors.shape[1]:
        return vectors
    return _normalize(vectors[:, :dimensions])


def encode_vector(vector: np.ndarray, encoding_format: str) -> list[float] | str:
    if encoding_format == "base64":
        return base64.b64encode(vector.astype("<f4", copy=False).tobytes()).decode("ascii")
    return vector.tolist()


def _quantize(vectors: np.ndarray, encoding_format: str) -> list[list[int] | str]:
    if encoding_format in ("int8", "uint8", "base64_int8"):
        q = int8_tanh(vectors)
        if encoding_format == "uint8":
            return (q.astype(np.int16) + 128).tolist()
    else:
        q = packed_sign_bits(vectors)
        if encoding_format == "binary":
            return (q.astype(np.int16) - 128).tolist()
    if encoding_format.startswith("base64_"):
        return [base64.b64encode(row.tobytes()).decode("ascii") for row in q]
    return q.tolist()


def encode_embeddings(
    vectors: np.ndarray, encoding_format: str, dimensions: int | None, is_normalized: bool
) -> list[list[float] | list[int] | str]:
    """[N, D] engine vectors -> one wire value per row.

    Matryoshka truncation comes first; quantised formats then read the (truncated) raw
    values, float formats their unit-length re-normalisation.
    """
    if encoding_format in QUANTIZED_FORMATS:
        cut = vectors if dimensions is None else vectors[:, :dimensions]
        return _quantize(cut, encoding_format)
    if is_normalized:
        unit = truncate_dimensions(vectors, dimensions)
    else:
        unit = _normalize(vectors if dimensions is None else vectors[:, :dimensions])
    return encode_vectors(unit, encoding_format)  # whole-array float / base64 JSON
