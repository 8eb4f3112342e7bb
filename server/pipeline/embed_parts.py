"""The parts of a request that embeds texts or token ids, whichever route's wire it came in on.

OpenAI's /v1/embeddings, Cohere's /v1/embed and /v2/embed and TEI's /embed differ only in how
they read the request and shape the answer: each cuts its inputs into the same parts, each part
tokenized (with the prompt, and its over-long inputs truncated, windowed or refused as the mode
says) and computed as soon as it is ready, and `finish` turns each part's vectors (one row per
input, windows already combined) into the route's answer for it as soon as they land.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial

import numpy as np

from rose_embed.server.http.errors import APIError
from rose_embed.server.pipeline.long_inputs import context_length_error, fit_request_texts, fit_request_token_ids
from rose_embed.server.pipeline.prompts import apply_prompt
from rose_embed.server.pipeline.request_pipeline import PART_TEXTS, ReadyPart, part_bounds
from rose_embed.server.pipeline.serving import Serving
from rose_embed.server.pipeline.served_models import ServedModel

Finish = Callable[[np.ndarray], Awaitable]
PartMaker = Callable[[], Awaitable[ReadyPart]]


def is_large_request(num_inputs: int) -> bool:
    """More inputs than one part holds: its parts may be tokenized and encoded in the part processes."""
    return num_inputs > PART_TEXTS


def text_parts(runtime: Serving, model: ServedModel, texts: list[str], prompt: str, mode: str, finish: Finish,
               too_long: Callable[[int, int], APIError] = context_length_error) -> list[PartMaker]:
    """`too_long(max_seq_len, num_tokens)`: the error for an input past the limit in mode "error"."""
    is_large = is_large_request(len(texts))
    return [partial(_texts_part, runtime, model, texts[lo:hi], prompt, mode, finish, is_large, too_long)
            for lo, hi in part_bounds(len(texts), runtime.part_texts(model, len(texts)))]


def token_id_parts(runtime: Serving, model: ServedModel, token_ids: list[list[int]], mode: str,
                   finish: Finish) -> list[PartMaker]:
    return [partial(_token_ids_part, model, token_ids[lo:hi], mode, finish)
            for lo, hi in part_bounds(len(token_ids), runtime.part_texts(model, len(token_ids)))]


async def _texts_part(runtime: Serving, model: ServedModel, texts: list[str], prompt: str, mode: str, finish: Finish,
                      is_large: bool, too_long) -> ReadyPart:
    seqs = await runtime.tokenize(apply_prompt(prompt, texts), is_large, model)
    fitted = await fit_request_texts(model.view.tokenizer, mode, texts, prompt, seqs, too_long)
    return ReadyPart(fitted.seqs, lambda vectors: finish(fitted.combine(vectors, model.view.spec.normalize)))


async def _token_ids_part(model: ServedModel, token_ids: list[list[int]], mode: str, finish: Finish) -> ReadyPart:
    fitted = fit_request_token_ids(model.view.tokenizer, mode, token_ids)
    return ReadyPart(fitted.seqs, lambda vectors: finish(fitted.combine(vectors, model.view.spec.normalize)))
