"""A request's over-long inputs: which mode applies, and the route's side of engine/text/long_inputs.py.

The server's `--long-inputs` is the default; a request's `long_inputs` field overrides it.
"error" answers OpenAI's context-length 400, as OpenAI does for any over-long input.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np

from rose_embed.engine.contract.config import LONG_INPUT_MODES
from rose_embed.engine.text.long_inputs import CannotWindowError, FittedInputs, InputTooLongError, fit_texts, fit_token_ids
from rose_embed.server.http.errors import APIError, invalid_request


def context_length_error(max_len: int, num_tokens: int) -> APIError:
    # OpenAI's wording for an over-long embeddings input, with param and code null as OpenAI sends them.
    return APIError(
        400,
        f"This model's maximum context length is {max_len} tokens, however you requested {num_tokens} tokens "
        f"({num_tokens} in your prompt; 0 for the completion). Please reduce your prompt; or completion length.",
        "invalid_request_error", None, None,
    )


def long_inputs_mode(default: str, asked: str | None) -> str:
    """The request's `long_inputs` where it gives one, else the server's --long-inputs."""
    if asked is None:
        return default
    if asked not in LONG_INPUT_MODES:
        raise invalid_request(f"'long_inputs' must be one of {', '.join(LONG_INPUT_MODES)}; got {asked!r}",
                              "long_inputs")
    return asked


async def fit_request_texts(tokenizer, mode: str, texts: list[str], prompt: str, seqs: list[np.ndarray],
                            too_long: Callable[[int, int], APIError] = context_length_error) -> FittedInputs:
    """`seqs`: the prompted texts tokenized at the limit. Only texts that came back at the limit
    can be longer; those few are tokenized again (and windowed) off the event loop. `too_long`:
    the error for an input past the limit in mode "error" (the route's wire says it its own way)."""
    if mode == "truncate" or all(len(s) < tokenizer.max_seq_len for s in seqs):
        return FittedInputs.one_each(seqs)
    with _as_api_errors(too_long):
        return await asyncio.to_thread(fit_texts, tokenizer, mode, texts, prompt, seqs)


def fit_request_token_ids(tokenizer, mode: str, token_ids: list[list[int]]) -> FittedInputs:
    with _as_api_errors():
        return fit_token_ids(tokenizer, mode, token_ids)


@contextmanager
def _as_api_errors(too_long: Callable[[int, int], APIError] = context_length_error) -> Iterator[None]:
    """InputTooLongError -> `too_long`'s 400 (OpenAI's context-length one by default); windows that
    cannot be built -> a 400 that says why, naming `long_inputs`."""
    try:
        yield
    except InputTooLongError as exc:
        raise too_long(exc.max_seq_len, exc.num_tokens) from None
    except CannotWindowError as exc:
        raise invalid_request(f"'long_inputs' chunk cannot be used for this input: {exc}", "long_inputs") from None
