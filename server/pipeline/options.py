"""Per-request output options checked against what the served model can produce."""

from __future__ import annotations

from rose_embed.engine.model_files.loader import ModelSpec
from rose_embed.server.http.errors import invalid_request


def check_encoding_format(allowed: tuple[str, ...], encoding_format: str, param: str = "encoding_format") -> None:
    """A 400 naming the formats this model can produce, `allowed` (int8 / binary need a quantising
    model: ServedModel.formats); `param`: the request field that asked for it."""
    if encoding_format not in allowed:
        raise invalid_request(
            f"this model writes only the formats {', '.join(allowed)}; '{param}' asked for {encoding_format!r}"
            if param != "encoding_format" else
            f"'encoding_format' must be one of {', '.join(allowed)} for this model; got {encoding_format!r}",
            param,
        )


def check_dimensions(spec: ModelSpec, dimensions: int | None, param: str = "dimensions") -> None:
    """Matryoshka sizes: any 1..full without a declaration, else the declared sizes (and full);
    `param`: the request field that asked for it."""
    full = spec.embedding_dim
    if dimensions is None or dimensions == full:
        return
    if spec.matryoshka_dims is None:
        if not 1 <= dimensions <= full:
            raise invalid_request(
                f"'{param}' must be between 1 and {full} for this model; got {dimensions}", param
            )
        return
    if dimensions not in spec.matryoshka_dims:
        sizes = ", ".join(str(d) for d in (*spec.matryoshka_dims, full))
        raise invalid_request(
            f"'{param}' must be one of {sizes} for this model (its Matryoshka sizes); got {dimensions}", param
        )
