"""A BGE-M3 model's `outputs` on /v1/embeddings: the names a request may ask for, and one text's item.

A request names any of the outputs, each at most once; each text's item holds those asked for, each
written as this server writes it alone: `dense` as an embedder's `embedding` (an array of floats, or
base64), `sparse` as a sparse model's {"indices", "values"} (compat/sparse_wire.py), `colbert` as a
multi-vector model's array of vectors (or one base64 string: compat/multi_vector_wire.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from rose_embed.compat.openai import MultiOutputEmbedding

OUTPUT_NAMES = ("dense", "sparse", "colbert")
MULTI_OUTPUT_OBJECT = "multi_output_embedding"


def read_outputs(outputs: Sequence[str]) -> tuple[str, ...]:
    """The outputs asked for, in the order sent; ValueError for an empty list, an unknown or a repeated name."""
    if not outputs:
        raise ValueError(f"'outputs' must name at least one of {', '.join(OUTPUT_NAMES)}")
    for i, name in enumerate(outputs):
        if name not in OUTPUT_NAMES:
            raise ValueError(f"'outputs' must hold only {', '.join(OUTPUT_NAMES)}; got {name!r}")
        if name in outputs[:i]:
            raise ValueError(f"'outputs' names {name!r} twice")
    return tuple(outputs)


def multi_output_item(index: int, answer: dict) -> MultiOutputEmbedding:
    """One text's item from its {output name: wire value}."""
    return MultiOutputEmbedding(index=index, object=MULTI_OUTPUT_OBJECT, **answer)
