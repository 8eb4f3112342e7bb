"""Normalise the four forms of `input` and reject malformed ones with a precise message."""

from __future__ import annotations

from dataclasses import dataclass

MAX_INPUTS = 2048


class InvalidInputError(ValueError):
    """A request field is malformed; `param` names it as OpenAI does."""

    def __init__(self, message: str, param: str = "input"):
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class NormalisedInput:
    """Either texts or token-id sequences, never both."""

    texts: list[str] | None = None
    token_ids: list[list[int]] | None = None

    def __len__(self) -> int:
        return len(self.texts if self.texts is not None else self.token_ids)


def _are_tokens(values: list) -> bool:
    """Every item an int. JSON true/false decode to bool, which isinstance counts as int, so the
    exact type is compared; the types are gathered in C, since a body may hold millions of ids
    and a check per id in Python would hold the event loop for seconds."""
    return set(map(type, values)) <= {int}


def normalise_input(value: object, max_inputs: int = MAX_INPUTS) -> NormalisedInput:
    """str | list[str] | list[int] | list[list[int]] -> NormalisedInput."""
    if isinstance(value, str):
        return NormalisedInput(texts=[value])
    if not isinstance(value, list):
        raise InvalidInputError(
            "'input' must be a string, an array of strings, an array of token ids or an array of "
            f"token-id arrays; got {type(value).__name__ if value is not None else 'null'}"
        )
    if not value:
        raise InvalidInputError("'input' must not be an empty array")
    # A flat array of token ids is one input, however many ids it holds (the model truncates it).
    if _are_tokens(value):
        return NormalisedInput(token_ids=[value])
    if len(value) > max_inputs:
        raise InvalidInputError(f"'input' holds {len(value)} items; at most {max_inputs} are allowed per request")
    if all(isinstance(v, str) for v in value):
        return NormalisedInput(texts=value)
    if all(isinstance(v, list) for v in value):
        for i, ids in enumerate(value):
            if not ids:
                raise InvalidInputError(f"'input[{i}]' is an empty token array; every input needs at least one token")
            if not _are_tokens(ids):
                raise InvalidInputError(f"'input[{i}]' must be an array of integer token ids")
        return NormalisedInput(token_ids=value)
    raise InvalidInputError(
        "'input' mixes types: use all strings, all token ids, or all token-id arrays"
    )


def check_token_range(token_ids: list[list[int]], vocab_size: int) -> None:
    """Every id must index the model's vocabulary."""
    for i, ids in enumerate(token_ids):
        low, high = min(ids), max(ids)
        if low < 0 or high >= vocab_size:
            bad = low if low < 0 else high
            raise InvalidInputError(
                f"'input[{i}]' holds token id {bad}, outside this model's vocabulary [0, {vocab_size}); "
                "token ids must come from the served model's own tokenizer (send text instead)"
            )
