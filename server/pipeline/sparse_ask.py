"""A sparse encoder's request as the pipeline reads it, whichever wire it came in on (TEI's
/embed_sparse, OpenAI's /v1/embeddings): the texts of an embeddings request, whose answer per
text is its (token id, weight) pairs instead of a dense vector.

Its parts, prompts, admission and queue are the embeddings ask's (server/pipeline/embed_ask.py);
what differs is each part's answer: the engine's rows (engine/contract/sparse_rows.py) read into
each text's pairs as soon as they land. Refused by name: `dimensions` and the quantized encodings
(a sparse vector has no prefix to cut and no float32 array to pack; base64 is answered as float,
server/routes/embeddings.py says why), and long_inputs
"chunk" (SparseEncoder truncates; windows would need a combination it does not define). A text
with more non-zero values than its row holds, where the model has no top-k that means to cut
there, is refused with a 400 rather than answered short.

An inference-free encoder (engine/model_files/sparse_router.py) encodes a request whose
`prompt_name` or `input_type` is "query" (SparseEncoder.encode_query's task) with its query side,
a weight per token looked up where the texts are tokenized, in parts that send nothing to the
engines; any other request with its document side, the model, as above (or as its default_route says).
Queries are cut at the query tokenizer's limit, as sentence-transformers cuts them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import numpy as np

from rose_embed.engine.contract.sparse_rows import SparseRow, read_rows
from rose_embed.engine.model_files.sparse_router import ROUTES
from rose_embed.server.http.errors import APIError, invalid_request
from rose_embed.server.http.trace import RequestTrace
from rose_embed.server.pipeline.compute_request import PartMaker
from rose_embed.server.pipeline.embed_ask import EmbedAsk
from rose_embed.server.pipeline.guards import check_finite
from rose_embed.server.pipeline.priority_pool import SMALL
from rose_embed.server.pipeline.prompts import apply_prompt, task_of
from rose_embed.server.pipeline.request_pipeline import Outcome, ReadyPart, part_bounds
from rose_embed.server.pipeline.served_models import ServedModel
from rose_embed.server.pipeline.serving import Serving
from rose_embed.server.pipeline.token_inputs import TokenInputs


@dataclass
class SparseAsk(EmbedAsk):
    return_text: bool = False  # the answer names each pair's token too
    _has_top_k: bool = field(default=False, init=False)
    _is_static_query: bool = field(default=False, init=False)  # the query side of an inference-free encoder

    def check(self, serving: Serving, model: ServedModel, trace: RequestTrace) -> int:
        if self.dimensions is not None:
            raise invalid_request(f"'{self.dimensions_param}' is not supported for a sparse model: its vectors have a "
                                  "dimension per token id, and only the non-zero ones are sent",
                                  self.dimensions_param)
        cost = super().check(serving, model, trace)
        if self._mode == "chunk":
            raise invalid_request("long_inputs 'chunk' is not supported for a sparse model (sentence-transformers "
                                  "truncates its inputs); send long_inputs 'truncate' or 'error'", "long_inputs")
        sparse = model.view.spec.sparse
        self._has_top_k = sparse.max_active_dims is not None
        task = task_of(self.prompt_name, self.input_type)
        route = task if task in ROUTES else sparse.default_route
        self._is_static_query = model.view.static_queries is not None and route == "query"
        return cost

    async def parts(self, serving: Serving, model: ServedModel, trace: RequestTrace,
                    token_inputs: TokenInputs) -> list[PartMaker]:
        if not self._is_static_query:
            return await super().parts(serving, model, trace, token_inputs)
        inputs = await token_inputs.decode_token_ids(self.inputs)
        if inputs.texts is None:
            raise invalid_request("token ids are not taken for an inference-free encoder's queries, whose tokenizer "
                                  "is not the model's; send the texts", self.param)
        texts = apply_prompt(self._prompt, inputs.texts)
        return [partial(self._static_part, serving, model, texts[lo:hi]) for lo, hi in part_bounds(len(texts))]

    async def _static_part(self, serving: Serving, model: ServedModel, texts: list[str]) -> ReadyPart:
        """Queries looked up where texts are tokenized: a part with nothing for the engines."""
        rows = await serving.tokenizer_pool.run(SMALL, model.view.static_queries.encode, texts)
        return ReadyPart([], lambda _: rows)

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
