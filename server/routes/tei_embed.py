"""POST /embed and POST /: Hugging Face TEI's embed, through the request pipeline.

TEI serves its model's main task at POST / as well, embed for an embedding model, and that is
where `huggingface_hub.InferenceClient(model=URL).feature_extraction` (and so LangChain's and
LlamaIndex's Hugging Face clients) post. GET / stays unserved: the docs page is at /docs.

The wire is compat/tei_embed.py's; the ask is /v1/embeddings' (server/pipeline/embed_ask.py). Errors
leave in the server's envelope with a 4xx, as /rerank's TEI body does.

`normalize: false` gives the vector as the model's own sentence-transformers modules leave it
(`SentenceTransformer.encode(..., normalize_embeddings=False)`): the raw pooled vector of a model
that hands it out (a quantising one), the unit vector of one whose modules end in Normalize
(all-MiniLM-L6-v2). Any other model's vectors are normalised on the device, where the raw ones
are gone, so for it `normalize: false` is refused by name rather than answered with unit vectors.
"""

from __future__ import annotations

from litestar import Request
from litestar.datastructures import State

from rose_embed.compat.inputs import NormalisedInput
from rose_embed.compat.tei_embed import TeiEmbedRequest, check_truncation_direction, texts_of
from rose_embed.engine.model_files.loader import ModelSpec
from rose_embed.engine.model_files.st_modules import Normalize
from rose_embed.server.config import ServerConfig
from rose_embed.server.http.errors import APIError, invalid_request
from rose_embed.server.http.openapi import EMBEDDINGS_ERROR_RESPONSES
from rose_embed.server.http.route_spec import RouteSpec
from rose_embed.server.pipeline.embed_ask import EmbedAsk
from rose_embed.server.pipeline.serve_request import Answered, RouteSteps, serve_request
from rose_embed.server.pipeline.served_models import ServedModel


def _read(data: TeiEmbedRequest, model: ServedModel, config: ServerConfig) -> EmbedAsk:
    texts = texts_of(data.inputs, config.max_request_inputs)
    check_truncation_direction(data.truncation_direction)
    if not data.normalize:
        _check_own_vectors(model.view.spec)
    return EmbedAsk(NormalisedInput(texts=texts), param="inputs", dimensions=data.dimensions,
                    prompt_name=data.prompt_name, long_inputs="truncate" if data.truncate else "error",
                    too_long=tei_too_long, own_vectors=not data.normalize)


def tei_too_long(max_len: int, num_tokens: int) -> APIError:
    """TEI's words for an input past the model's limit (/embed_sparse's too)."""
    return invalid_request(f"An input of 'inputs' holds {num_tokens} tokens, more than this model's limit of "
                           f"{max_len}; send \"truncate\": true to have its end cut, as TEI asks", "inputs",
                           "context_length_exceeded")


def _answer(done: Answered) -> list[list[float]]:
    return done.result[0]


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


TEI_EMBED = RouteSteps(TeiEmbedRequest, "embedding", _read, _answer)


async def tei_embed(request: Request, state: State) -> list[list[float]]:
    return await serve_request(request, state, TEI_EMBED)


ROUTES = [RouteSpec(tei_embed, "POST", ("/embed", "/"), "Create embeddings (Hugging Face TEI's embed)",
                    EMBEDDINGS_ERROR_RESPONSES, body=TeiEmbedRequest)]
