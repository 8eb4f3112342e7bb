"""A contextualized-embeddings request as the pipeline reads it: documents cut into chunks, one
vector per chunk, each chunk read in its document's context (engine/text/late_chunking.py).

Each document runs as one sequence (or, past the model's limit, as windows cut at chunk
boundaries); the windows go through the request pipeline as one part, each window carrying its
chunks as pooling segments. Its result is each document's chunk count and every chunk's vector,
encoded as asked.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from rose_embed.compat.encoding import encode_embeddings
from rose_embed.compat.inputs import NormalisedInput
from rose_embed.engine.text.late_chunking import ChunkTooLongError, EmptyChunkError, LateChunkedDocuments, \
    fit_documents
from rose_embed.engine.text.long_inputs import CannotWindowError
from rose_embed.server.http.errors import APIError, invalid_request
from rose_embed.server.http.trace import RequestTrace
from rose_embed.server.pipeline.compute_request import PartMaker
from rose_embed.server.pipeline.guards import check_finite
from rose_embed.server.pipeline.long_inputs import context_length_error, long_inputs_mode
from rose_embed.server.pipeline.options import check_dimensions, check_encoding_format
from rose_embed.server.pipeline.prompts import resolve_prompt
from rose_embed.server.pipeline.request_cost import request_cost
from rose_embed.server.pipeline.request_pipeline import Outcome, ReadyPart
from rose_embed.server.pipeline.served_models import ServedModel
from rose_embed.server.pipeline.serving import Serving
from rose_embed.server.pipeline.token_inputs import TokenInputs


@dataclass
class ChunkedAsk:
    documents: list[list[str]]
    param: str  # the field that held the documents, as errors name it
    encoding_format: str
    format_param: str
    dimensions: int | None
    dimensions_param: str
    prompt_name: str | None = None
    input_type: str | None = None
    long_inputs: str | None = None  # the request's mode; None: the server's --long-inputs
    priority: int | None = None
    _prompt: str = field(default="", init=False)
    _mode: str = field(default="", init=False)

    def check(self, serving: Serving, model: ServedModel, trace: RequestTrace) -> int:
        spec = model.view.spec
        config = serving.config
        check_encoding_format(model.formats, self.encoding_format, self.format_param)
        check_dimensions(spec, self.dimensions, self.dimensions_param)
        self._prompt = resolve_prompt(spec.prompts, spec.default_prompt_name, self.prompt_name, self.input_type)
        self._mode = long_inputs_mode(config.long_inputs, self.long_inputs)
        _check_chunk_chars(self.documents, self.param, config.max_input_chars)
        chunks = [chunk for document in self.documents for chunk in document]
        trace.texts = chunks if config.log_inputs else None
        # Every window counts, its special and prompt tokens too: what the model reads.
        return request_cost(NormalisedInput(texts=chunks), spec.max_seq_len, self._mode == "chunk")

    async def parts(self, serving: Serving, model: ServedModel, trace: RequestTrace,
                    token_inputs: TokenInputs) -> list[PartMaker]:
        async def make_ready() -> ReadyPart:
            with _as_api_errors(self.param):
                fitted: LateChunkedDocuments = await asyncio.to_thread(
                    fit_documents, model.view.tokenizer, self._mode, self.documents, self._prompt,
                    serving.config.engine.max_batch_seqs)
            trace.num_inputs = sum(fitted.num_chunks)
            return ReadyPart(fitted.seqs, lambda vectors: self._finish(fitted, vectors, model, trace), fitted.segments)

        return [make_ready]

    def _finish(self, fitted: LateChunkedDocuments, vectors, model: ServedModel,
                trace: RequestTrace) -> tuple[list[int], list]:
        chunk_vectors = fitted.combine(vectors, model.normalizes)
        check_finite(chunk_vectors, trace.request_id)
        return fitted.num_chunks, encode_embeddings(chunk_vectors, self.encoding_format, self.dimensions,
                                                    model.normalizes)

    def parts_ahead(self, serving: Serving, model: ServedModel) -> int | None:
        return None

    def result(self, outcome: Outcome, trace: RequestTrace) -> tuple[list[int], list]:
        """Each document's chunk count, and every chunk's vector as asked, in order."""
        return outcome.answers[0]


def cannot_late_chunk(why: str) -> APIError:
    return invalid_request(
        f"This model cannot embed chunks in the context of their document: {why}. Contextualized embeddings "
        "(late chunking) need a model with bidirectional attention and mean pooling; use /v1/embeddings "
        "to embed each chunk on its own.", "model", "model_cannot_late_chunk")


def _check_chunk_chars(documents: list[list[str]], param: str, max_chars: int) -> None:
    """Each chunk, as each input of /v1/embeddings, is checked before the tokenizer reads all of it."""
    for i, document in enumerate(documents):
        for j, chunk in enumerate(document):
            if len(chunk) > max_chars:
                raise invalid_request(f"'{param}[{i}][{j}]' holds {len(chunk)} characters; at most {max_chars} are "
                                      "allowed per chunk (split it, or start the server with a larger "
                                      "--max-input-chars)", param, "input_too_long")


@contextmanager
def _as_api_errors(param: str) -> Iterator[None]:
    try:
        yield
    except EmptyChunkError as exc:
        raise invalid_request(f"'{param}[{exc.document}][{exc.chunk}]' gives no tokens of its own (it is only "
                              "whitespace or characters the tokenizer drops), so it has no vector", param) from None
    except ChunkTooLongError as exc:  # long_inputs "error"
        raise context_length_error(exc.max_seq_len, exc.num_tokens) from None
    except CannotWindowError as exc:
        raise cannot_late_chunk(str(exc)) from None
