"""Per-request output options checked against what the served model can produce."""

from __future__ import annotations

from compat.encoding import encoding_formats
from engine.loader import ModelSpec
from server.errors import invalid_request


def check_encoding_format(spec: ModelSpec, encoding_format: str) -> None:
    """A 400 naming the formats this model can produce (int8 / binary need a quantising model)."""
    allowed = encoding_formats(spec.quantization)
    if encoding_format not in allowed:
        raise invalid_request(
            f"'encoding_format' must be one of {', '.join(allowed)} for this model; got {encoding_format!r}",
            "encoding_format",
        )


def check_dimensions(spec: ModelSpec, dimensions: int | None) -> None:
    """Matryoshka sizes: any 1..full without a declaration, else the declared sizes (and full)."""
    full = spec.embedding_dim
    if dimensions is None or dimensions == full:
        return
    if spec.matryoshka_dims is None:
        if not 1 <= dimensions <= full:
            raise invalid_request(
                f"'dimensions' must be between 1 and {full} for this model; got {dimensions}", "dimensions"
            )
        return
    if dimensions not in spec.matryoshka_dims:
        sizes = ", ".join(str(d) for d in (*spec.matryoshka_dims, full))
        raise invalid_request(
            f"'dimensions' must be one of {sizes} for this model (its Matryoshka sizes); got {dimensions}",
            "dimensions",
        )
