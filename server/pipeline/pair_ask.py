"""A rerank request as the pipeline reads it, whichever wire it came in on (Cohere's, Jina's, TEI's):
a query and the documents scored against it, each (query, document) pair one sequence
(server/pipeline/pair_parts.py). Its result is [score, raw logit] per document, in order."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from rose_embed.server.http.trace import RequestTrace
from rose_embed.server.pipeline.compute_request import PartMaker
from rose_embed.server.pipeline.guards import check_finite
from rose_embed.server.pipeline.pair_parts import pair_parts, pairs_ahead, pairs_cost
from rose_embed.server.pipeline.request_pipeline import Outcome
from rose_embed.server.pipeline.served_models import ServedModel
from rose_embed.server.pipeline.serving import Serving
from rose_embed.server.pipeline.token_inputs import TokenInputs


@dataclass
class PairAsk:
    query: str
    documents: list[str]
    max_doc_tokens: int | None = None
    # Called with the index of the first document whose pair was cut at the model's limit, where
    # the wire refuses that rather than cut (TEI's `truncate` false).
    check_truncated: Callable[[int], None] | None = None
    priority: int | None = None

    def check(self, serving: Serving, model: ServedModel, trace: RequestTrace) -> int:
        self._trace(serving, trace)
        return pairs_cost(self.query, self.documents, model.view.spec.max_seq_len)

    def _trace(self, serving: Serving, trace: RequestTrace) -> None:
        trace.num_inputs = len(self.documents)
        trace.texts = [self.query, *self.documents] if serving.config.log_inputs else None

    async def parts(self, serving: Serving, model: ServedModel, trace: RequestTrace,
                    token_inputs: TokenInputs) -> list[PartMaker]:
        return pair_parts(serving, model, self.query, self.documents, self.max_doc_tokens, self.check_truncated)

    def parts_ahead(self, serving: Serving, model: ServedModel) -> int | None:
        return pairs_ahead(serving)

    def result(self, outcome: Outcome, trace: RequestTrace) -> np.ndarray:
        rows = np.concatenate(outcome.answers) if outcome.answers else np.zeros((0, 2), np.float32)
        check_finite(rows, trace.request_id)
        return rows
