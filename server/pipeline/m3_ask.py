"""A BGE-M3 model's embeddings request as the pipeline reads it (OpenAI's /v1/embeddings): the texts of an
embeddings request and the outputs asked of them, all computed in one pass of the model.

`outputs` absent: each text's dense vector, in OpenAI's shape, so that OpenAI's SDK, LangChain and
LlamaIndex work unchanged. `outputs` given: any of "dense", "sparse" and "colbert", each text's item
holding those (compat/multi_output_wire.py). How a text is laid out in the batch follows from them
(engine/contract/m3_rows.py): the dense vector alone is one pooling segment per text, one row back; with
"sparse" or "colbert" every token is a segment, its row its vector and lexical weight, and the text's
rows are cut into its outputs as they land: the first row's dense vector, the later rows' token vectors,
and each token id's largest lexical weight.

Refused by name: unknown or repeated `outputs`, `dimensions` beside sparse or colbert outputs (a dense
vector may be cut, re-normalised, as any embedder's), encodings other than float and base64, long_inputs
"chunk" (FlagEmbedding truncates; windows would need a way of combining token outputs it does not
define; the server's --long-inputs chunk becomes truncate here), and token-id inputs beside sparse or
colbert outputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rose_embed.compat.multi_output_wire import read_outputs
from rose_embed.compat.multi_vector_wire import multi_vector
from rose_embed.compat.sparse_wire import sparse_embedding
from rose_embed.engine.contract import m3_rows
from rose_embed.server.http.errors import invalid_request
from rose_embed.server.http.trace import RequestTrace
from rose_embed.server.pipeline.compute_request import PartMaker
from rose_embed.server.pipeline.embed_ask import EmbedAsk
from rose_embed.server.pipeline.guards import check_finite
from rose_embed.server.pipeline.long_inputs import fit_request_texts
from rose_embed.server.pipeline.prompts import apply_prompt
from rose_embed.server.pipeline.request_pipeline import Outcome, ReadyPart, part_bounds
from rose_embed.server.pipeline.served_models import ServedModel
from rose_embed.server.pipeline.serving import Serving
from rose_embed.server.pipeline.token_inputs import TokenInputs

_PER_TOKEN = ("sparse", "colbert")  # the outputs that need every token's row


@dataclass
class M3Ask(EmbedAsk):
    outputs: list[str] | None = None  # as the request sent them; None: the dense vector in OpenAI's shape
    _asked: tuple[str, ...] = field(default=("dense",), init=False)

    @property
    def per_token(self) -> bool:
        return any(name in self._asked for name in _PER_TOKEN)

    def check(self, serving: Serving, model: ServedModel, trace: RequestTrace) -> int:
        if self.outputs is not None:
            try:
                self._asked = read_outputs(self.outputs)
            except ValueError as exc:
                raise invalid_request(str(exc), "outputs") from None
        dense_dim = model.view.spec.m3.dense_dim
        dimensions, self.dimensions = self.dimensions, None  # checked against the dense vector, not the rows
        if self.long_inputs == "chunk":
            raise invalid_request("long_inputs 'chunk' is not supported for a BGE-M3 model (FlagEmbedding truncates "
                                  "its inputs); send long_inputs 'truncate' or 'error'", "long_inputs")
        cost = super().check(serving, model, trace)
        if self._mode == "chunk":  # the server's default, for its embedders
            self._mode = "truncate"
        self.dimensions = dimensions
        if dimensions is not None and self.per_token:
            raise invalid_request(f"'{self.dimensions_param}' applies to the dense output only; it cannot be sent "
                                  "with sparse or colbert outputs", self.dimensions_param)
        if dimensions is not None and not 1 <= dimensions <= dense_dim:
            raise invalid_request(f"'{self.dimensions_param}' must be between 1 and {dense_dim} for this model; got "
                                  f"{dimensions}", self.dimensions_param)
        if self.per_token and self.inputs.texts is None:
            raise invalid_request("token ids are taken for the dense output only; send the texts for sparse or "
                                  "colbert outputs", self.param)
        return cost

    async def parts(self, serving: Serving, model: ServedModel, trace: RequestTrace,
                    token_inputs: TokenInputs) -> list[PartMaker]:
        if not self.per_token:
            return await super().parts(serving, model, trace, token_inputs)
        texts = self.inputs.texts
        trace.texts = texts if serving.config.log_inputs else None
        return [self._token_part_maker(serving, model, trace, texts[lo:hi])
                for lo, hi in part_bounds(len(texts), serving.part_texts(model, len(texts)))]

    def _token_part_maker(self, serving: Serving, model: ServedModel, trace: RequestTrace,
                          texts: list[str]) -> PartMaker:
        async def ready() -> ReadyPart:
            seqs = await serving.tokenize(apply_prompt(self._prompt, texts), self._is_large, model)
            fitted = await fit_request_texts(model.view.tokenizer, self._mode, texts, self._prompt, seqs,
                                             self.too_long)
            segments = [m3_rows.token_segments(seq) for seq in fitted.seqs]
            return ReadyPart(fitted.seqs, lambda rows: self._finish_tokens(serving, model, trace, fitted.seqs, rows),
                             segments)
        return ready

    async def _finish(self, serving: Serving, model: ServedModel, trace: RequestTrace,
                      vectors: np.ndarray) -> list[list]:
        """One row per text: its dense vector in the format asked for."""
        dense = m3_rows.dense_vectors(vectors, model.view.spec.m3.dense_dim)
        return await super()._finish(serving, model, trace, dense)

    async def _finish_tokens(self, serving: Serving, model: ServedModel, trace: RequestTrace,
                             seqs: list[np.ndarray], rows: np.ndarray) -> list[dict]:
        """A row per token: each text's outputs, {name: its wire value}."""
        check_finite(rows, trace.request_id)
        m3 = model.view.spec.m3
        per_text = np.split(rows, np.cumsum([len(seq) for seq in seqs])[:-1])
        answers: list[dict] = [{} for _ in seqs]
        if "dense" in self._asked:
            first_rows = np.stack([text_rows[0] for text_rows in per_text])
            dense = await serving.encode(m3_rows.dense_vectors(first_rows, m3.dense_dim), self.formats[0], None,
                                         self._is_large, model)
            for answer, vector in zip(answers, dense):
                answer["dense"] = vector
        for answer, seq, text_rows in zip(answers, seqs, per_text):
            if "sparse" in self._asked:
                answer["sparse"] = sparse_embedding(*m3_rows.lexical_weights(seq, text_rows, m3.unused_ids))
            if "colbert" in self._asked:
                vectors = m3_rows.colbert_vectors(text_rows, m3.colbert_dim)
                answer["colbert"] = multi_vector(vectors, self.formats[0])
        return answers

    def result(self, outcome: Outcome, trace: RequestTrace) -> list:
        """Every input's dense vector (in a list per format, as the embeddings ask gives them) without
        `outputs`; with them, every input's {name: wire value}, in order."""
        if self.outputs is None:
            return super().result(outcome, trace)
        if self.per_token:
            return [answer for part in outcome.answers for answer in part]
        return [{"dense": vector} for vector in super().result(outcome, trace)[0]]

