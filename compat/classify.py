"""msgspec Structs for classification: vLLM's POST /classify and Hugging Face TEI's POST /predict.

vLLM's (vllm/entrypoints/pooling/classify/protocol.py and serving.py, with the pooling request
mixins of vllm/entrypoints/pooling/base/protocol.py): `input`, a string or an array of strings, and
`model`; `use_activation` (and its older names `activation`, `softmax`) false gives the raw logits
instead of the probabilities; `truncate_prompt_tokens`, `add_special_tokens` and `priority`. The
answer: `id` ("classify-..."), `object` "list", `created`, `model`, `data` with each input's
`index`, `label` (the label of its largest probability, from id2label), `probs` (one per label, in
label order) and `num_classes`, and `usage` (`prompt_tokens`, `total_tokens`, `completion_tokens` 0,
`prompt_tokens_details` null). Token-id input and chat messages are refused by field.

TEI's (router/src/http/types.rs, PredictRequest, PredictInput and Prediction; router/src/http/
server.rs, predict): `inputs` is a text, a pair of texts `[text, text]` (a one-text array is a text),
or a batch of both, `[[text], [text, text], ...]`; `truncate` (false or absent: an input over the
model's limit is refused, as TEI refuses it unless started with --auto-truncate), `raw_scores`
(the logits before the activation) and `truncation_direction` (Right only). The answer is a list
of `{"score", "label"}` per label, highest score first, or for a batch one such list per input.

Unknown fields are ignored, as clients add their own. `model` is not TEI's: it picks one of
several served models.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from rose_embed.compat.inputs import InvalidInputError
from rose_embed.compat.openai import MODEL_FIELD_DESCRIPTION, documented

# A text, or a pair of texts read as one sequence (TEI's pairs).
ClassifyInput = str | tuple[str, str]

_TEXTS = {"type": "array", "items": {"type": "string"}, "minItems": 1}
_SEQUENCE = {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2}


class ClassifyRequest(msgspec.Struct, kw_only=True):
    """POST /classify (vLLM's)."""

    # str | list[str]; `classify_inputs_of` checks the shape and names the field in its 400
    input: Annotated[Any, documented("A text, or an array of texts, to classify.",
                                     oneOf=[{"type": "string"}, _TEXTS])]
    model: Annotated[str | None, documented(MODEL_FIELD_DESCRIPTION)] = None
    use_activation: Annotated[bool | None, documented(
        "false: each label's raw logit in `probs` instead of its probability (default true).")] = None
    activation: Annotated[bool | None, documented("vLLM's older name for `use_activation`.")] = None
    softmax: Annotated[bool | None, documented("vLLM's older name for `use_activation`.")] = None
    truncate_prompt_tokens: Annotated[int | None, documented(
        "Only -1 (cut an input at the model's limit) is taken; without it, --long-inputs says what an "
        "over-long input gets.")] = None
    add_special_tokens: Annotated[bool, documented("Only true: the model reads its special tokens.")] = True
    user: Annotated[str | None, documented("Accepted and ignored.")] = None
    priority: Annotated[int | None, documented(
        "vLLM's priority: an integer from -10 to 10, lower meaning sooner (default 0).")] = None


class ClassificationData(msgspec.Struct, kw_only=True, omit_defaults=False):
    index: int
    label: str | None
    probs: list[float]
    num_classes: int


class ClassifyUsage(msgspec.Struct, kw_only=True, omit_defaults=False):
    prompt_tokens: int
    total_tokens: int
    completion_tokens: int = 0
    prompt_tokens_details: None = None


class ClassifyResponse(msgspec.Struct, kw_only=True):
    id: str
    created: int
    model: str
    data: list[ClassificationData]
    usage: ClassifyUsage
    object: str = "list"


class PredictRequest(msgspec.Struct, kw_only=True):
    """POST /predict (TEI's)."""

    # str | [str] | [str, str] | list of those; `predict_inputs_of` checks the shape
    inputs: Annotated[Any, documented(
        "A text, a pair of texts [text, text], or a batch of texts and pairs [[text], [text, text], ...].",
        oneOf=[{"type": "string"}, _SEQUENCE, {"type": "array", "items": _SEQUENCE, "minItems": 1}])]
    raw_scores: Annotated[bool, documented("The logits before the model's activation.")] = False
    truncate: Annotated[bool | None, documented(
        "Cut an input over the model's limit (false or absent: a 400 for it, as TEI answers).")] = None
    truncation_direction: Annotated[str, documented("Only Right (the end of an input is cut).",
                                                    enum=["Right", "right"])] = "Right"
    model: Annotated[str | None, documented(MODEL_FIELD_DESCRIPTION + " Not TEI's: TEI serves one model.")] = None


class Prediction(msgspec.Struct, kw_only=True):
    score: float
    label: str


def classify_inputs_of(request: ClassifyRequest, max_inputs: int) -> list[str]:
    """`input` as a list of texts; InvalidInputError names what /classify does not take."""
    value = request.input
    if isinstance(value, str):
        texts = [value]
    elif isinstance(value, list) and value and all(isinstance(text, str) for text in value):
        texts = value
    elif isinstance(value, list) and not value:
        raise InvalidInputError("'input' must not be an empty array", "input")
    else:
        raise InvalidInputError("'input' must be a string or an array of strings (token ids and conversations are "
                                "not taken by /classify)", "input")
    if len(texts) > max_inputs:
        raise InvalidInputError(f"'input' holds {len(texts)} items; at most {max_inputs} are allowed per request",
                                "input")
    if request.truncate_prompt_tokens not in (None, -1):
        raise InvalidInputError("'truncate_prompt_tokens' takes only -1 (the model's limit); an over-long input is "
                                "cut at its end there, or refused, as --long-inputs says", "truncate_prompt_tokens")
    if not request.add_special_tokens:
        raise InvalidInputError("'add_special_tokens' false is not supported: a classifier reads its special tokens",
                                "add_special_tokens")
    return texts


def uses_activation(request: ClassifyRequest) -> bool:
    """vLLM's rule: `use_activation`, else its older names `softmax` then `activation`, else true."""
    for value in (request.use_activation, request.softmax, request.activation):
        if value is not None:
            return value
    return True


def _sequence(value: Any, where: str) -> ClassifyInput:
    if not isinstance(value, list) or not 1 <= len(value) <= 2 or not all(isinstance(t, str) for t in value):
        raise InvalidInputError(f"'{where}' must be [text] or a pair [text, text]; a batch is an array of those",
                                "inputs")
    return value[0] if len(value) == 1 else (value[0], value[1])


def is_predict_batch(inputs: Any) -> bool:
    """TEI's `inputs` is a batch, answered with one list per input: an array whose first item is an array."""
    return isinstance(inputs, list) and bool(inputs) and isinstance(inputs[0], list)


def predict_inputs_of(inputs: Any, max_inputs: int) -> list[ClassifyInput]:
    """TEI's `inputs` as texts and pairs; InvalidInputError for any other shape."""
    if isinstance(inputs, str):
        return [inputs]
    if not isinstance(inputs, list) or not inputs:
        raise InvalidInputError("'inputs' must be a text, a pair [text, text], or a non-empty batch [[text], "
                                "[text, text], ...]", "inputs")
    if not is_predict_batch(inputs):
        return [_sequence(inputs, "inputs")]
    if len(inputs) > max_inputs:
        raise InvalidInputError(f"'inputs' holds {len(inputs)} items; at most {max_inputs} are allowed per request",
                                "inputs")
    return [_sequence(value, f"inputs[{i}]") for i, value in enumerate(inputs)]

