"""A classify request as the pipeline reads it, whichever wire it came in on (vLLM's /classify, TEI's
/predict): texts and pairs of texts, each one sequence (server/pipeline/classify_parts.py), and
what becomes of one over the model's limit. Its result is each input's probabilities then raw
logits, [N, 2 * num_labels], in order."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from rose_embed.compat.classify import ClassifyInput
from rose_embed.server.http.errors import APIError
from rose_embed.server.http.trace import RequestTrace
from rose_embed.server.pipeline.classify_parts import classify_parts
from rose_embed.server.pipeline.compute_request import PartMaker
from rose_embed.server.pipeline.guards import check_finite, check_input_chars
from rose_embed.server.pipeline.request_cost import input_cost
from rose_embed.server.pipeline.request_pipeline import Outcome
from rose_embed.server.pipeline.served_models import ServedModel
from rose_embed.server.pipeline.serving import Serving
from rose_embed.server.pipeline.token_inputs import TokenInputs


def _joined(one: ClassifyInput) -> str:
    return one if isinstance(one, str) else one[0] + one[1]


@dataclass
class ClassifyAsk:
    inputs: list[ClassifyInput]
    param: str  # the field that held the inputs, as errors name it
    cut_long: bool  # an input over the model's limit is cut at its end; else the errors below
    too_long: Callable[[int, int], APIError]  # a text past the limit: (max_seq_len, its tokens)
    pair_too_long: Callable[[int], APIError]  # a pair past the limit: (its index)
    priority: int | None = None

    def check(self, serving: Serving, model: ServedModel, trace: RequestTrace) -> int:
        config = serving.config
        joined = [_joined(one) for one in self.inputs]  # a pair is read, and costs, as its two texts
        trace.num_inputs = len(self.inputs)
        trace.texts = joined if config.log_inputs else None
        check_input_chars(joined, config.max_input_chars, param=self.param)
        max_seq_len = model.view.spec.max_seq_len
        return sum(input_cost(len(text), max_seq_len, is_chunked=False) for text in joined)

    async def parts(self, serving: Serving, model: ServedModel, trace: RequestTrace,
                    token_inputs: TokenInputs) -> list[PartMaker]:
        return classify_parts(serving, model, self.inputs, self.cut_long, self.too_long, self.pair_too_long)

    def parts_ahead(self, serving: Serving, model: ServedModel) -> int | None:
        return None

    def result(self, outcome: Outcome, trace: RequestTrace) -> np.ndarray:
        rows = np.concatenate(outcome.answers)
        check_finite(rows, trace.request_id)
        return rows
