"""The wire of Hugging Face TEI's POST /embed.

Request: `inputs` (a string or an array of strings), `normalize` (true by default), `truncate`
(false or absent: an input over the model's limit is refused, as TEI refuses it unless started
with --auto-truncate), `truncation_direction` (Right, as TEI spells it, or right), `prompt_name`,
`dimensions`. The answer is a bare array of vectors, one per input, in order. TEI's other input
forms (token ids, conversations) and `truncation_direction` Left are refused here by field
(InvalidInputError). `model` is not TEI's: it picks one of several served models.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from rose_embed.compat.inputs import InvalidInputError
from rose_embed.compat.openai import MODEL_FIELD_DESCRIPTION, PROMPT_NAME_DESCRIPTION, documented


class TeiEmbedRequest(msgspec.Struct, kw_only=True):
    """POST /embed. Unknown fields are ignored."""

    # str | list[str]; `texts_of` checks the shape and names the field in its 400
    inputs: Annotated[Any, documented(
        "A text, or an array of texts.",
        oneOf=[{"type": "string"}, {"type": "array", "items": {"type": "string"}, "minItems": 1}])]
    normalize: Annotated[bool, documented(
        "L2-normalise each vector (default); false gives the vector as the model's own modules leave it.")] = True
    truncate: Annotated[bool | None, documented(
        "Cut an input over the model's limit (false or absent: a 400 for it, as TEI answers).")] = None
    truncation_direction: Annotated[str, documented("Only Right (the end of an input is cut).",
                                                    enum=["Right", "right"])] = "Right"
    prompt_name: Annotated[str | None, documented(PROMPT_NAME_DESCRIPTION)] = None
    dimensions: Annotated[int | None, documented("Keep the first this many dimensions (Matryoshka).",
                                                 minimum=1)] = None
    model: Annotated[str | None, documented(MODEL_FIELD_DESCRIPTION + " Not TEI's: TEI serves one model.")] = None


def texts_of(inputs: Any, max_inputs: int) -> list[str]:
    """`inputs` as a list of texts."""
    if isinstance(inputs, str):
        return [inputs]
    if not isinstance(inputs, list) or not all(isinstance(text, str) for text in inputs):
        raise InvalidInputError("'inputs' must be a string or an array of strings (token ids and conversations are "
                                "not taken here; /v1/embeddings takes token ids)", "inputs")
    if not inputs:
        raise InvalidInputError("'inputs' must not be an empty array", "inputs")
    if len(inputs) > max_inputs:
        raise InvalidInputError(f"'inputs' holds {len(inputs)} items; at most {max_inputs} are allowed per request",
                                "inputs")
    return inputs


def check_truncation_direction(direction: str) -> None:
    if direction in ("Right", "right"):
        return
    if direction in ("Left", "left"):
        raise InvalidInputError("'truncation_direction' Left is not supported: an input over the model's limit is cut "
                                "at its end, as the model's tokenizer cuts it", "truncation_direction")
    raise InvalidInputError(f"'truncation_direction' must be Right; got {direction!r}", "truncation_direction")
