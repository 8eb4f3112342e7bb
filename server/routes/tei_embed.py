"""POST /embed and POST /: Hugging Face TEI's embed, through the request pipeline.

TEI serves its model's main task at POST / as well, embed for an embedding model, and that is
where `huggingface_hub.InferenceClient(model=URL).feature_extraction` (and so LangChain's and
LlamaIndex's Hugging Face clients) post. GET / stays unserved: the docs page is at /docs.

The wire is compat/tei_embed.py's; the parts are /v1/embeddings' (server/pipeline/embed_parts.py). Errors
leave in the server's envelope with a 4xx, as /rerank's TEI body does.

`normalize: false` gives the vector as the model's own sentence-transformers modules leave it
(`SentenceTransformer.encode(..., normalize_embeddings=False)`): the raw pooled vector of a model
that hands it out (a quantising one), the unit vector of one whose modules end in Normalize
(all-MiniLM-L6-v2). Any other model's vectors are normalised on the device, where the raw ones
are gone, so for it `normalize: false` is refused by name rather than answered with unit vectors.
"""

from __future__ import annotations

import numpy as np
from litestar import Request
from litestar.datastructures import State

from rose_embed.compat.tei_embed import TeiEmbedRequest, check_truncation_direction, texts_of
from rose_embed.compat.vector_wire import encode_vectors
from rose_embed.engine.model_files.loader import ModelSpec
from rose_embed.engine.model_files.st_modules import Normalize
from rose_embed.server.pipeline.embed_parts import is_large_request, text_parts
from rose_embed.server.http.errors import APIError, invalid_request
from rose_embed.server.pipeline.guards import check_finite, check_input_chars, decode_request
from rose_embed.server.pipeline.model_kind import require_embedder
from rose_embed.server.http.openapi import EMBEDDINGS_ERROR_RESPONSES
from rose_embed.server.http.route_spec import RouteSpec
from rose_embed.server.pipeline.options import check_dimensions
from rose_embed.server.pipeline.prompts import resolve_prompt
from rose_embed.compat.inputs import NormalisedInput
from rose_embed.server.pipeline.request_cost import request_cost
from rose_embed.server.routes.support import admitted, compute_parts, pick_model, runtime_of, trace_of

async def tei_embed(request: Request, state: State) -> list[list[float]]:
    runtime = runtime_of(state)
    data = decode_request(await request.body(), TeiEmbedRequest)
    model = pick_model(request, runtime, data.model, "embedding")
    spec = model.view.spec
    require_embedder(spec, model.name)
    texts = texts_of(data.inputs, runtime.config.max_request_inputs)
    check_truncation_direction(data.truncation_direction)
    check_dimensions(spec, data.dimensions)
    if not data.normalize:
        _check_own_vectors(spec)
    prompt = resolve_prompt(spec.prompts, spec.default_prompt_name, data.prompt_name, None)
    check_input_chars(texts, runtime.config.max_input_chars, param="inputs")
    trace = trace_of(request)
    trace.num_inputs = len(texts)
    trace.texts = texts if runtime.config.log_inputs else None
    is_large = is_large_request(len(texts))

    async def finish(vectors: np.ndarray) -> list:
        check_finite(vectors, trace.request_id)
        if data.normalize:
            return await runtime.encode(vectors, "float", data.dimensions, is_large, model)
        # The model's own vectors, cut as sentence-transformers' truncate_dim cuts them: not re-normalised.
        return encode_vectors(vectors[:, :data.dimensions], "float")

    def too_long(max_len: int, num_tokens: int) -> APIError:
        return invalid_request(f"An input of 'inputs' holds {num_tokens} tokens, more than this model's limit of "
                               f"{max_len}; send \"truncate\": true to have its end cut, as TEI asks", "inputs",
                               "context_length_exceeded")

    mode = "truncate" if data.truncate else "error"
    parts = text_parts(runtime, model, texts, prompt, mode, finish, too_long)
    with admitted(request, runtime, model, request_cost(NormalisedInput(texts=texts), spec.max_seq_len)) as queued:
        outcome = await compute_parts(request, runtime, trace, parts, model, queued)
    return [row for answer in outcome.answers for row in answer]


def _check_own_vectors(spec: ModelSpec) -> None:
    """The engine hands out the model's own vectors where it does not normalise them, or where the
    model's modules end in Normalize anyway (and no truncate_dim cuts after it)."""
    if not spec.normalize:
        return
    if spec.head and isinstance(spec.head[-1], Normalize) and spec.truncate_dim is None:
        return
    raise invalid_request("'normalize' false is not supported for this model: its vectors are L2-normalised as "
                          "they are computed, and its own modules end without that normalisation, so the "
                          "unnormalised vector is not at hand; send \"normalize\": true", "normalize")


ROUTES = [RouteSpec(tei_embed, "POST", ("/embed", "/"), "Create embeddings (Hugging Face TEI's embed)",
                    EMBEDDINGS_ERROR_RESPONSES, body=TeiEmbedRequest)]
