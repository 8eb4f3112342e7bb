"""POST /v1/contextualizedembeddings: one vector per chunk, each chunk read in its document's context.

The wire is compat/contextualized.py's (Perplexity's contract, Voyage AI's spelling too); the
computation engine/text/late_chunking.py's: each document runs as one sequence (or, past the
model's limit, as windows cut at chunk boundaries) and every chunk's vector is the mean of
its own tokens' states. Only a model with bidirectional attention and mean pooling can do
that; any other gets a 400 that says why. The windows go through the request pipeline
(server/pipeline/request_pipeline.py) as one part, each window carrying its chunks as pooling segments.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

from litestar import Request
from litestar.datastructures import State

from rose_embed.compat.contextualized import (
    ContextualizedEmbeddingRequest,
    ContextualizedEmbeddingResponse,
    DocumentEmbeddings,
    dimensions_of,
    documents_of,
    encoding_format_of,
)
from rose_embed.compat.encoding import encode_embeddings
from rose_embed.compat.openai import Embedding, Usage
from rose_embed.engine.text.late_chunking import ChunkTooLongError, EmptyChunkError, LateChunkedDocuments, fit_documents, \
    late_chunking_problem
from rose_embed.engine.text.long_inputs import CannotWindowError
from rose_embed.server.http.errors import invalid_request
from rose_embed.server.pipeline.guards import check_finite, decode_request
from rose_embed.server.pipeline.model_kind import require_embedder
from rose_embed.server.pipeline.long_inputs import context_length_error, long_inputs_mode
from rose_embed.server.http.openapi import EMBEDDINGS_ERROR_RESPONSES
from rose_embed.server.http.route_spec import RouteSpec
from rose_embed.server.pipeline.options import check_dimensions, check_encoding_format
from rose_embed.server.pipeline.prompts import resolve_prompt
from rose_embed.server.pipeline.request_pipeline import ReadyPart
from rose_embed.compat.inputs import NormalisedInput
from rose_embed.server.pipeline.request_cost import request_cost
from rose_embed.server.routes.support import admitted, compute_parts, pick_model, runtime_of, trace_of


def default_encoding_format(spec) -> str:
    """The model's own: Perplexity's base64_int8 for a quantising model (pplx-embed), else float."""
    return "base64_int8" if spec.quantization == "tanh" else "float"


async def create_contextualized_embeddings(request: Request, state: State) -> ContextualizedEmbeddingResponse:
    runtime = runtime_of(state)
    data = decode_request(await request.body(), ContextualizedEmbeddingRequest)
    model = pick_model(request, runtime, data.model, "embedding")
    spec = model.view.spec
    require_embedder(spec, model.name)
    problem = late_chunking_problem(spec)
    if problem is not None:
        raise _cannot_late_chunk(problem)
    documents, param = documents_of(data)
    encoding_format, format_param = encoding_format_of(data, default_encoding_format(spec))
    check_encoding_format(spec, encoding_format, format_param)
    dimensions, dimensions_param = dimensions_of(data)
    check_dimensions(spec, dimensions, dimensions_param)
    prompt = resolve_prompt(spec.prompts, spec.default_prompt_name, data.prompt_name, data.input_type)
    mode = long_inputs_mode(runtime.config.long_inputs, data.long_inputs)
    _check_chunk_chars(documents, param, runtime.config.max_input_chars)
    trace = trace_of(request)
    trace.texts = [chunk for document in documents for chunk in document] if runtime.config.log_inputs else None

    async def make_ready() -> ReadyPart:
        with _as_api_errors(param):
            fitted: LateChunkedDocuments = await asyncio.to_thread(
                fit_documents, model.view.tokenizer, mode, documents, prompt, runtime.config.engine.max_batch_seqs)
        trace.num_inputs = sum(fitted.num_chunks)
        return ReadyPart(fitted.seqs, lambda vectors: (fitted, fitted.combine(vectors, spec.normalize)),
                         fitted.segments)

    # Every window counts, its special and prompt tokens too: what the model reads.
    chunks = NormalisedInput(texts=[chunk for document in documents for chunk in document])
    with admitted(request, runtime, model, request_cost(chunks, spec.max_seq_len, mode == "chunk")) as queued:
        outcome = await compute_parts(request, runtime, trace, [make_ready], model, queued)
    fitted, vectors = outcome.answers[0]
    num_tokens = outcome.num_tokens
    check_finite(vectors, trace.request_id)
    embeddings = encode_embeddings(vectors, encoding_format, dimensions, spec.normalize)
    out, first = [], 0
    for i, count in enumerate(fitted.num_chunks):
        out.append(DocumentEmbeddings(index=i, data=[Embedding(index=j, embedding=embeddings[first + j])
                                                     for j in range(count)]))
        first += count
    return ContextualizedEmbeddingResponse(
        data=out, model=model.name,
        usage=Usage(prompt_tokens=num_tokens, total_tokens=num_tokens),
    )


def _cannot_late_chunk(why: str):
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
        raise _cannot_late_chunk(str(exc)) from None


ROUTES = [RouteSpec(create_contextualized_embeddings, "POST",
                    ("/v1/contextualizedembeddings", "/contextualizedembeddings"),
                    "Create contextualized chunk embeddings (late chunking)", EMBEDDINGS_ERROR_RESPONSES,
                    body=ContextualizedEmbeddingRequest)]
