"""A response's vectors -> JSON fragments, the whole [N, D] array at once.

The simple path (`compat.encoding.encode_vector` per row: `tolist()` then msgspec) makes a
Python float object per element and formats each in the event loop; at GPU rates that is
most of a core. Here each row becomes one `msgspec.Raw` fragment that msgspec copies into
the body as it is:

- float: orjson formats the row from the array's memory (no Python floats). The row is
  widened to float64 first, so the text is the shortest repr of the float64 that equals the
  float32: the same digits `tolist()` + msgspec write, and exact in float32 and float64
  (orjson writes `e+20` where msgspec writes `e20`, for |x| >= 1e16 only). Without orjson
  installed, rows fall back to `tolist()`.
- base64: one binascii call per row on the little-endian float32 bytes, quoted; base64's
  alphabet needs no JSON escaping.

Other formats go through `encode_vector` row by row, unchanged.
"""

from __future__ import annotations

import binascii

import msgspec
import numpy as np


try:
    import orjson

    _NUMPY = orjson.OPT_SERIALIZE_NUMPY
except ImportError:  # an optional speed-up; the simple path gives the same values
    orjson = None


def float_fragments(vectors: np.ndarray) -> list[msgspec.Raw] | list[list[float]]:
    """[N, D] -> one JSON array text per row, float32-exact."""
    wide = np.ascontiguousarray(vectors, dtype=np.float64)
    if orjson is None:
        return wide.tolist()
    dumps = orjson.dumps
    return [msgspec.Raw(dumps(row, option=_NUMPY)) for row in wide]


def base64_fragments(vectors: np.ndarray) -> list[msgspec.Raw]:
    """[N, D] -> one quoted base64 string per row of little-endian float32 bytes."""
    raw = np.ascontiguousarray(vectors, dtype="<f4")
    b2a = binascii.b2a_base64
    return [msgspec.Raw(b'"' + b2a(row.data, newline=False) + b'"') for row in raw]


def encode_vectors(vectors: np.ndarray, encoding_format: str) -> list:
    """Each row of [N, D] float32 in `encoding_format`, as values for `Embedding.embedding`."""
    if encoding_format == "float":
        return float_fragments(vectors)
    if encoding_format == "base64":
        return base64_fragments(vectors)
    raise ValueError(f"no whole-array encoder for {encoding_format!r}")
