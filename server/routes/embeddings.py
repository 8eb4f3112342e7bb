"""POST /v1/embeddings (and /embeddings): OpenAI's embeddings, through the request pipeline.

The inputs are cut into parts (server/pipeline/embed_parts.py, which Cohere's and TEI's embed routes
share); over-long inputs are truncated, windowed or refused as `long_inputs` says, and each
part's vectors are encoded as soon as they land.
"""

from __future__ import annotations

import numpy as np
from litestar import Request
from litestar.datastructures import State

from rose_embed.compat.inputs import normalise_input
from rose_embed.compat.openai import Embedding, EmbeddingRequest, EmbeddingResponse, Usage
from rose_embed.server.pipeline.embed_parts import is_large_request, text_parts, token_id_parts
from rose_embed.server.pipeline.guards import check_finite, check_input_chars, decode_request
from rose_embed.server.pipeline.model_kind import require_embedder
from rose_embed.server.pipeline.long_inputs import long_inputs_mode
from rose_embed.server.http.openapi import EMBEDDINGS_ERROR_RESPONSES
from rose_embed.server.http.route_spec import RouteSpec
from rose_embed.server.pipeline.options import check_dimensions, check_encoding_format
from rose_embed.server.pipeline.prompts import resolve_prompt
from rose_embed.server.pipeline.request_cost import request_cost
from rose_embed.server.routes.support import admitted, compute_parts, pick_model, runtime_of, trace_of
from rose_embed.server.pipeline.token_inputs import TokenInputs


async def create_embeddings(request: Request, state: State) -> EmbeddingResponse:
    runtime = runtime_of(state)
    # Decoded here, strictly: Litestar's own decoding would turn "8" into 8 for an int field.
    data = decode_request(await request.body())
    model = pick_model(request, runtime, data.model, "embedding")
    spec = model.view.spec
    require_embedder(spec, model.name)
    check_encoding_format(spec, data.encoding_format)
    check_dimensions(spec, data.dimensions)
    token_inputs: TokenInputs = state.token_inputs
    sent = normalise_input(data.input, runtime.config.max_request_inputs)
    prompt = resolve_prompt(spec.prompts, spec.default_prompt_name, data.prompt_name, data.input_type)
    mode = long_inputs_mode(runtime.config.long_inputs, data.long_inputs)
    trace = trace_of(request)
    trace.num_inputs = len(sent)
    is_large = is_large_request(len(sent))

    async def finish(vectors: np.ndarray) -> list:
        check_finite(vectors, trace.request_id)
        return await runtime.encode(vectors, data.encoding_format, data.dimensions, is_large, model)

    if sent.texts is not None:
        check_input_chars(sent.texts, runtime.config.max_input_chars, is_chunked=mode == "chunk")
    # Admitted before any decoding or tokenizing: a request the queue has no room for costs nothing more.
    with admitted(request, runtime, model, request_cost(sent, spec.max_seq_len, mode == "chunk"),
                  data.priority) as queued:
        inputs = await token_inputs.decode_token_ids(sent)
        if inputs.texts is not None:
            if sent.token_ids is not None:  # texts decoded from cl100k ids
                check_input_chars(inputs.texts, runtime.config.max_input_chars, is_chunked=mode == "chunk",
                                  token_ids=sent.token_ids)
            trace.texts = inputs.texts if runtime.config.log_inputs else None
            parts = text_parts(runtime, model, inputs.texts, prompt, mode, finish)
        else:
            token_inputs.check_token_ids(inputs.token_ids, model.view.vocab_size)
            parts = token_id_parts(runtime, model, inputs.token_ids, mode, finish)
        outcome = await compute_parts(request, runtime, trace, parts, model, queued)
    embeddings = [e for answers in outcome.answers for e in answers]
    return EmbeddingResponse(
        data=[Embedding(index=i, embedding=e) for i, e in enumerate(embeddings)],
        model=model.name,  # the model that computed the vectors, whichever name was asked (server/pipeline/aliases.py)
        # Every window counts: the cap, `usage` and the log see what the model reads.
        usage=Usage(prompt_tokens=outcome.num_tokens, total_tokens=outcome.num_tokens),
    )


ROUTES = [RouteSpec(create_embeddings, "POST", ("/v1/embeddings", "/embeddings"), "Create embeddings",
                    EMBEDDINGS_ERROR_RESPONSES, body=EmbeddingRequest)]
