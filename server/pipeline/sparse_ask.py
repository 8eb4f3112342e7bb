"""A sparse encoder's request as the pipeline reads it, whichever wire it came in on (TEI's
/embed_sparse, OpenAI's /v1/embeddings): the texts of an embeddings request, whose answer per
text is its (token id, weight) pairs instead of a dense vector.

Its parts, prompts, admission and queue are the embeddings ask's (server/pipeline/embed_ask.py);
what differs is each part's answer: the engine's rows (engine/contract/sparse_rows.py) read into
each text's pairs as soon as they land. Refused by name: `dimensions` and encodings other than
float (a sparse vector has no prefix to cut and no float32 array to pack), and long_inputs
"chunk" (SparseEncoder truncates; windows would need a combination it does not define). A text
with more non-zero values than its row holds, where the model has no top-k that means to cut
there, is refused with a 400 rather than answered short.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rose_embed.engine.contract.sparse_rows import SparseRow, read_rows
from rose_embed.server.http.errors import APIError, invalid_request
from rose_embed.server.http.trace import RequestTrace
from rose_embed.server.pipeline.embed_ask import EmbedAsk
from rose_embed.server.pipeline.guards import check_finite
from rose_embed.server.pipeline.request_pipeline import Outcome
from rose_embed.server.pipeline.served_models import ServedModel
from rose_embed.server.pipeline.serving import Serving


@dataclass
class SparseAsk(EmbedAsk):
    return_text: bool = False  # the answer names each pair's token too
    _has_top_k: bool = field(default=False, init=False)

    def check(self, serving: Serving, model: ServedModel, trace: RequestTrace) -> int:
        if self.dimensions is not None:
            raise invalid_request(f"'{self.dimensions_param}' is not supported for a sparse model: its vectors have a "
                                  "dimension per token id, and only the non-zero ones are sent",
                                  self.dimensions_param)
        cost = super().check(serving, model, trace)
        if self._mode == "chunk":
            raise invalid_request("long_inputs 'chunk' is not supported for a sparse model (sentence-transformers "
                                  "truncates its inputs); send long_inputs 'truncate' or 'error'", "long_inputs")
        self._has_top_k = model.view.spec.sparse.max_active_dims is not None
        return cost

    async def _finish(self, serving: Serving, model: ServedModel, trace: RequestTrace,
                      vectors: np.ndarray) -> list[SparseRow]:
        """A part's rows read into each text's pairs."""
        check_finite(vectors, trace.request_id)
        return read_rows(vectors)

    def result(self, outcome: Outcome, trace: RequestTrace) -> list[SparseRow]:
        """Every input's pairs, in order."""
        rows = [row for answer in outcome.answers for row in answer]
        if not self._has_top_k:
            for i, row in enumerate(rows):
                if row.is_cut:
                    raise self._too_many(i, row)
        return rows

    def _too_many(self, index: int, row: SparseRow) -> APIError:
        return invalid_request(
            f"'{self.param}[{index}]' has {row.num_active} non-zero dimensions, more than the {len(row.indices)} this "
            "server hands out per input for this model; send a shorter text, or start the server with "
            "--max-active-dims N to keep each input's N largest, as SparseEncoder.encode(max_active_dims=N) does",
            self.param, "too_many_active_dims")


def tokens_of(model: ServedModel, row: SparseRow) -> list[str]:
    """The tokens of a row's indices, as the model's vocabulary spells them."""
    return model.view.tokenizer.token_strings(row.indices.tolist())
