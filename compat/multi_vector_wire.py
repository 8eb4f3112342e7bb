"""A multi-vector (ColBERT) text's token vectors -> one JSON value, float32-exact.

float   [[...], [...], ...]: one array per kept token, in the text's order
base64  one string of the text's vectors as little-endian float32 bytes, row after row: decoded and
        reshaped to (-1, dimensions) it is the float answer
"""

from __future__ import annotations

import msgspec
import numpy as np
import orjson
import pybase64

MULTI_VECTOR_FORMATS = ("float", "base64")


def multi_vector(vectors: np.ndarray, encoding_format: str) -> msgspec.Raw:
    """vectors [n, dim] float32 -> the text's `embedding` value in `encoding_format`."""
    if encoding_format == "float":
        return msgspec.Raw(orjson.dumps(np.ascontiguousarray(vectors, dtype=np.float32),
                                        option=orjson.OPT_SERIALIZE_NUMPY))
    if encoding_format == "base64":
        return msgspec.Raw(b'"' + pybase64.b64encode(np.ascontiguousarray(vectors, dtype="<f4").data) + b'"')
    raise ValueError(f"no multi-vector encoding {encoding_format!r}")
