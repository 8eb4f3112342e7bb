"""Quantised embeddings as pplx-embed defines them (its st_quantize.FlexibleQuantizer).

int8   = clamp(round(127 * tanh(x)), -128, 127): a fixed squash, so no per-corpus
         calibration is needed and the raw (unnormalised) pooled vector's scale matters.
bits   = x >= 0 per dimension, packed eight to a byte, most significant bit first
         (numpy.packbits), the last byte zero-padded when the size is not a multiple of 8.
"""

from __future__ import annotations

import numpy as np


def int8_tanh(vectors: np.ndarray) -> np.ndarray:
    """[N, D] float -> [N, D] int8."""
    return np.clip(np.rint(127.0 * np.tanh(vectors.astype(np.float32))), -128, 127).astype(np.int8)


def packed_sign_bits(vectors: np.ndarray) -> np.ndarray:
    """[N, D] float -> [N, ceil(D / 8)] uint8 ("ubinary")."""
    return np.packbits(vectors >= 0, axis=-1)
