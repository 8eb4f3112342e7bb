"""The parts of a classify request: its texts and pairs of texts, a part's worth each.

Every input is one sequence: a text tokenized as an embedder's is (Serving.tokenize, cut at the
model's limit), a pair as a cross-encoder's pair (Serving.tokenize_each_pair, cut longest-first).
Where the route refuses an over-long input rather than cut it, a text past the limit is the
route's `too_long` error (server/pipeline/long_inputs.py finds it), a cut pair its
`pair_too_long`. The engine hands back each input's probabilities then raw logits; a part's answer
is those rows, in input order.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from rose_embed.compat.classify import ClassifyInput
from rose_embed.server.http.errors import APIError
from rose_embed.server.pipeline.compute_request import PartMaker
from rose_embed.server.pipeline.embed_parts import is_large_request
from rose_embed.server.pipeline.long_inputs import fit_request_texts
from rose_embed.server.pipeline.request_pipeline import ReadyPart, part_bounds
from rose_embed.server.pipeline.served_models import ServedModel
from rose_embed.server.pipeline.serving import Serving


def classify_parts(serving: Serving, model: ServedModel, inputs: list[ClassifyInput], cut_long: bool,
                   too_long: Callable[[int, int], APIError],
                   pair_too_long: Callable[[int], APIError]) -> list[PartMaker]:
    """`too_long(max_seq_len, num_tokens)`, `pair_too_long(index)`: the errors for an input past the
    limit where `cut_long` is false (`index` counts in the whole request)."""
    is_large = is_large_request(len(inputs))
    return [partial(_part, serving, model, inputs[lo:hi], lo, is_large, cut_long, too_long, pair_too_long)
            for lo, hi in part_bounds(len(inputs), serving.part_texts(model, len(inputs)))]


async def _part(serving: Serving, model: ServedModel, inputs: list[ClassifyInput], first: int, is_large: bool,
                cut_long: bool, too_long, pair_too_long) -> ReadyPart:
    seqs: list[np.ndarray | None] = [None] * len(inputs)
    texts = [i for i, one in enumerate(inputs) if isinstance(one, str)]
    pairs = [i for i, one in enumerate(inputs) if not isinstance(one, str)]
    if texts:
        text_list = [inputs[i] for i in texts]
        cut = await serving.tokenize(text_list, is_large, model)
        fitted = await fit_request_texts(model.view.tokenizer, "truncate" if cut_long else "error", text_list, "",
                                         cut, too_long)
        for i, seq in zip(texts, fitted.seqs):
            seqs[i] = seq
    if pairs:
        encoded = await serving.tokenize_each_pair([inputs[i] for i in pairs], is_large, model)
        if not cut_long and encoded.truncated:
            raise pair_too_long(first + pairs[encoded.truncated[0]])
        for i, seq in zip(pairs, encoded.seqs):
            seqs[i] = seq
    return ReadyPart(seqs, lambda rows: rows.copy())
