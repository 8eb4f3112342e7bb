"""A multi-vector (ColBERT) model's embeddings request as the pipeline reads it (OpenAI's /v1/embeddings):
the texts of an embeddings request, whose answer per text is one vector per kept token.

Its parts, admission and queue are the embeddings ask's (server/pipeline/embed_ask.py); what differs:
each text is tokenized as a query or a document (engine/text/colbert_tokens.py), each kept token a
pooling segment of its own, so a part's rows are its texts' token vectors one after another, cut
apart by each text's count as soon as they land. The request says which side its texts are with
`input_type` or `prompt_name`: "query" (or "search_query") encodes them as PyLate's
`encode(is_query=True)`, "document" (or "search_document", or neither) as `encode(is_query=False)`.

Sizes: a query gives query_length vectors, a document at most document_length (PyLate cuts a
longer one there, and so does this server, whatever --long-inputs says; a request may send
long_inputs "truncate" or none).
Refused by name: `dimensions`, encodings other than float and base64, token-id inputs (the prefix
and expansion tokens are put in by the tokenizer step), long_inputs "chunk" and "error".
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rose_embed.compat.multi_vector_wire import multi_vector
from rose_embed.server.http.errors import invalid_request
from rose_embed.server.http.trace import RequestTrace
from rose_embed.server.pipeline.compute_request import PartMaker
from rose_embed.server.pipeline.embed_ask import EmbedAsk
from rose_embed.server.pipeline.guards import check_finite
from rose_embed.server.pipeline.priority_pool import LARGE, SMALL
from rose_embed.server.pipeline.prompts import task_of
from rose_embed.server.pipeline.request_pipeline import ReadyPart, part_bounds
from rose_embed.server.pipeline.served_models import ServedModel
from rose_embed.server.pipeline.serving import Serving
from rose_embed.server.pipeline.token_inputs import TokenInputs

_SIDES = {"query": True, "document": False, None: False}  # task -> is_query


def colbert_side(prompt_name: str | None, input_type: str | None) -> bool:
    """Whether the texts are queries; a 400 for a task that is neither side."""
    if prompt_name is not None and input_type is not None and prompt_name != input_type:
        raise invalid_request("give either 'prompt_name' or 'input_type', not both", "prompt_name")
    task = task_of(prompt_name, input_type)
    if task not in _SIDES:
        param = "prompt_name" if prompt_name is not None else "input_type"
        raise invalid_request(f"'{param}' must be 'query' or 'document' for a multi-vector (ColBERT) model; got "
                              f"{task!r}", param)
    return _SIDES[task]


def split_vectors(rows: np.ndarray, segments: list[np.ndarray]) -> list[np.ndarray]:
    """A part's rows [sum of counts, dim] -> each text's [count, dim], its count its segments'."""
    counts = [int(ids.max()) + 1 if len(ids) else 0 for ids in segments]
    if sum(counts) != len(rows):
        raise ValueError(f"{len(rows)} token vectors came back for {sum(counts)} kept tokens")
    return np.split(rows, np.cumsum(counts)[:-1])


@dataclass
class ColbertAsk(EmbedAsk):
    _is_query: bool = field(default=False, init=False)

    def check(self, serving: Serving, model: ServedModel, trace: RequestTrace) -> int:
        if self.dimensions is not None:
            raise invalid_request(f"'{self.dimensions_param}' is not supported for a multi-vector (ColBERT) model: "
                                  "its token vectors have the size its projection gives", self.dimensions_param)
        self._is_query = colbert_side(self.prompt_name, self.input_type)
        self.prompt_name = self.input_type = None  # a side, not a prompt: the tokenizer step puts in its prefix
        if self.long_inputs not in (None, "truncate"):
            raise invalid_request(f"long_inputs {self.long_inputs!r} is not supported for a multi-vector (ColBERT) "
                                  "model: PyLate cuts queries at query_length and documents at document_length; send "
                                  "long_inputs 'truncate' or none", "long_inputs")
        self.long_inputs = "truncate"  # the server's --long-inputs is for embedders: this model cuts as PyLate does
        cost = super().check(serving, model, trace)
        if self.inputs.texts is None:
            raise invalid_request("token ids are not taken for a multi-vector (ColBERT) model, whose query and "
                                  "document tokens are built from the text; send the texts", self.param)
        return cost

    async def parts(self, serving: Serving, model: ServedModel, trace: RequestTrace,
                    token_inputs: TokenInputs) -> list[PartMaker]:
        texts = self.inputs.texts
        trace.texts = texts if serving.config.log_inputs else None
        priority = LARGE if self._is_large else SMALL  # as check() sized the request
        return [self._part_maker(serving, model, trace, texts[lo:hi], priority)
                for lo, hi in part_bounds(len(texts), serving.part_texts(model, len(texts)))]

    def _part_maker(self, serving: Serving, model: ServedModel, trace: RequestTrace, texts: list[str],
                    priority: int) -> PartMaker:
        async def ready() -> ReadyPart:
            seqs, segments = await serving.tokenizer_pool.run(priority, model.view.colbert.encode, texts,
                                                              self._is_query)
            return ReadyPart(seqs, lambda rows: self._finish_part(trace, rows, segments), segments)
        return ready

    def _finish_part(self, trace: RequestTrace, rows: np.ndarray, segments: list[np.ndarray]) -> list:
        """Per format asked for, each text's vectors in it."""
        check_finite(rows, trace.request_id)
        per_text = split_vectors(rows, segments)
        return [[multi_vector(vectors, name) for vectors in per_text] for name in self.formats]
