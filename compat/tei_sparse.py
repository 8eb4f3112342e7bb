"""The wire of Hugging Face TEI's POST /embed_sparse.

Request: `inputs` (a string or an array of strings), `truncate` (false or absent: an input over
the model's limit is refused, as TEI refuses it unless started with --auto-truncate),
`truncation_direction` (Right), `prompt_name`, as TEI's EmbedSparseRequest; `return_text` (each
pair also names its token, as TEI's rerank names its texts) and `model` (one of several served
models) are not TEI's. The answer is TEI's: an array, one per input in order, of the input's
non-zero dimensions as `{"index": token id, "value": weight}`, ascending by index.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from rose_embed.compat.openai import MODEL_FIELD_DESCRIPTION, PROMPT_NAME_DESCRIPTION, documented


class TeiSparseRequest(msgspec.Struct, kw_only=True):
    """POST /embed_sparse. Unknown fields are ignored."""

    # str | list[str]; compat/tei_embed.py's texts_of checks the shape and names the field in its 400
    inputs: Annotated[Any, documented(
        "A text, or an array of texts.",
        oneOf=[{"type": "string"}, {"type": "array", "items": {"type": "string"}, "minItems": 1}])]
    truncate: Annotated[bool | None, documented(
        "Cut an input over the model's limit (false or absent: a 400 for it, as TEI answers).")] = None
    truncation_direction: Annotated[str, documented("Only Right (the end of an input is cut).",
                                                    enum=["Right", "right"])] = "Right"
    prompt_name: Annotated[str | None, documented(PROMPT_NAME_DESCRIPTION)] = None
    return_text: Annotated[bool, documented(
        "Each pair also names its token (`text`), as the vocabulary spells it. Not TEI's.")] = False
    model: Annotated[str | None, documented(MODEL_FIELD_DESCRIPTION + " Not TEI's: TEI serves one model.")] = None


class SparseValue(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One non-zero dimension of a sparse vector: TEI's SparseValue, with its token where asked."""

    index: int
    value: float
    text: str | None = None
