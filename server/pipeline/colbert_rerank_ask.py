"""A rerank request for a multi-vector (ColBERT) model, whichever wire it came in on (Cohere's, Jina's,
TEI's): the documents scored against the query by late interaction, MaxSim, on the device.

Its parts are a few dozen documents each, as a cross-encoder's are; a part is tokenized as PyLate
encodes (the query in query mode, the documents in document mode) and laid out in groups, the query
then as many documents as the batch budget holds beside it (engine/text/colbert_groups.py), so that
a piece or batch is cut between groups only. The engine (engine/rose/layers/maxsim_head.py) hands
back one row per document holding its score in the first column, never the token vectors. The
result is the cross-encoder's [score, raw] per document, both the raw MaxSim (PyLate's
colbert_scores: a sum over the query's vectors, no activation), so the route answers alike.

PyLate cuts queries at query_length and documents at document_length, and so does the server: TEI's
`truncate` false refuses nothing here, as /v1/embeddings cuts a ColBERT model's texts whatever
--long-inputs says (`check_truncated` is never called). `max_tokens_per_doc` cuts each document's own
tokens before that. What the two kinds share (the trace, how many parts may wait ahead, the result
rows) is PairAsk's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rose_embed.engine.text.colbert_groups import encode_rerank
from rose_embed.server.http.trace import RequestTrace
from rose_embed.server.pipeline.compute_request import PartMaker
from rose_embed.server.pipeline.embed_parts import is_large_request
from rose_embed.server.pipeline.pair_ask import PairAsk
from rose_embed.server.pipeline.priority_pool import LARGE, SMALL
from rose_embed.server.pipeline.request_cost import input_cost
from rose_embed.server.pipeline.request_pipeline import ReadyPart, part_bounds
from rose_embed.server.pipeline.served_models import ServedModel
from rose_embed.server.pipeline.serving import Serving
from rose_embed.server.pipeline.token_inputs import TokenInputs


@dataclass
class ColbertRerankAsk(PairAsk):
    def check(self, serving: Serving, model: ServedModel, trace: RequestTrace) -> int:
        self._trace(serving, trace)
        colbert = model.view.spec.colbert
        max_tokens, _ = serving.batch_budget
        # Each group repeats the query: about one per batch budget's worth of documents.
        per_group = max(1, (max_tokens - colbert.query_length) // colbert.document_length)
        num_groups = -(-len(self.documents) // per_group)
        return (num_groups * colbert.query_length
                + sum(input_cost(len(d), colbert.document_length, is_chunked=False) for d in self.documents))

    async def parts(self, serving: Serving, model: ServedModel, trace: RequestTrace,
                    token_inputs: TokenInputs) -> list[PartMaker]:
        priority = LARGE if is_large_request(len(self.documents)) else SMALL
        return [self._part_maker(serving, model, self.documents[lo:hi], priority)
                for lo, hi in part_bounds(len(self.documents))]

    def _part_maker(self, serving: Serving, model: ServedModel, documents: list[str], priority: int) -> PartMaker:
        async def ready() -> ReadyPart:
            max_tokens, max_seqs = serving.batch_budget
            seqs, segments = await serving.tokenizer_pool.run(priority, encode_rerank, model.view.colbert, self.query,
                                                              documents, self.max_doc_tokens, max_tokens, max_seqs)
            return ReadyPart(seqs, _scores, segments)
        return ready


def _scores(rows: np.ndarray) -> np.ndarray:
    """A part's rows [documents, dim] -> [documents, 2]: (score, raw), both the MaxSim in column 0."""
    return np.repeat(rows[:, :1], 2, axis=1)
