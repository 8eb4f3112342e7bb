"""POST /v2/embed and /v1/embed: Cohere's embed, through the request pipeline.

The wire is compat/cohere_embed.py's; the ask is /v1/embeddings' (server/pipeline/embed_ask.py).
The vectors are computed once, and each part's are written in every type the request asks for
as soon as they land. Cohere's int8, uint8, binary and ubinary come from its own models'
training; this server writes them only for a model that defines its own quantisation (as for
/v1/embeddings' `encoding_format`), and refuses them by name for any other, rather than
inventing a quantisation of its own. For a model with a vision tower (CLIP), `images` and `inputs`'
`image_url` parts are embedded as /v1/embeddings' image items are (server/pipeline/image_parts.py,
docs/images.md), texts beside them in order.
"""

from __future__ import annotations

import uuid

from litestar import Request
from litestar.datastructures import State

from rose_embed.compat.cohere_embed import (CohereEmbedFloatsResponse, CohereEmbedRequest, CohereEmbedResponse,
                                 EMBEDDING_TYPES, EmbeddingsByType, check_input_type, embedding_types_of,
                                 inputs_of, long_inputs_mode_of)
from rose_embed.compat.rerank import ApiVersion, BilledUnits, RerankMeta
from rose_embed.server.config import ServerConfig
from rose_embed.server.http.errors import APIError, invalid_request
from rose_embed.server.http.openapi import EMBEDDINGS_ERROR_RESPONSES
from rose_embed.server.http.route_spec import RouteSpec
from rose_embed.server.pipeline.embed_ask import EmbedAsk
from rose_embed.server.pipeline.serve_request import Answered, RouteSteps, serve_request
from rose_embed.server.pipeline.served_models import ServedModel


def _read(data: CohereEmbedRequest, model: ServedModel, config: ServerConfig) -> EmbedAsk:
    spec = model.view.spec
    inputs, param = inputs_of(data, config.max_request_inputs)
    types = embedding_types_of(data)
    _check_types(types, model.formats)
    mode = long_inputs_mode_of(data.truncate)
    _check_max_tokens(data.max_tokens, spec.max_seq_len)
    check_input_type(data.input_type)
    input_type = data.input_type
    if input_type == "image":
        if not model.takes_images:
            raise invalid_request(f"'input_type' image: the model '{model.name}' embeds texts only (it has no vision "
                                  "tower); send images to a CLIP model, or texts with a text input type", "input_type")
        input_type = None  # images take no prompt

    def too_long(max_len: int, num_tokens: int) -> APIError:
        return invalid_request(f"An input of '{param}' holds {num_tokens} tokens, more than this model's limit of "
                               f"{max_len}; send \"truncate\": \"END\" (the default) to have its end cut",
                               param, "context_length_exceeded")

    return EmbedAsk(inputs, param=param, formats=tuple(types), format_param=None,
                    dimensions=data.output_dimension, dimensions_param="output_dimension",
                    input_type=input_type, long_inputs=mode, too_long=too_long)


def _answer(done: Answered) -> CohereEmbedResponse | CohereEmbedFloatsResponse:
    data, ask = done.data, done.ask
    inputs = ask.inputs
    texts = inputs.texts if inputs.texts is not None else [item for item in inputs.items if isinstance(item, str)]
    by_type = dict(zip(ask.formats, done.result))
    is_v1 = done.request.url.path.startswith("/v1/")
    meta = RerankMeta(api_version=ApiVersion(version="1" if is_v1 else "2"),
                      billed_units=BilledUnits(input_tokens=done.num_tokens))
    if is_v1 and data.embedding_types is None:
        return CohereEmbedFloatsResponse(id=str(uuid.uuid4()), embeddings=by_type["float"], texts=texts, meta=meta)
    embeddings = EmbeddingsByType(**{("float_" if name == "float" else name): rows for name, rows in by_type.items()})
    return CohereEmbedResponse(id=str(uuid.uuid4()), embeddings=embeddings, texts=texts, meta=meta)


def _check_types(types: list[str], served: tuple[str, ...]) -> None:
    for name in types:
        if name not in served:
            given = ", ".join(t for t in EMBEDDING_TYPES if t in served)
            raise invalid_request(
                f"'embedding_types' {name!r} is not served for this model: Cohere's {name} comes from its own "
                "models' training, and this server writes int8, uint8, binary and ubinary only for a model that "
                f"defines its own quantisation; this one gives {given}", "embedding_types")


def _check_max_tokens(max_tokens: int | None, max_seq_len: int) -> None:
    """At or above the model's limit `max_tokens` changes nothing; below it, inputs would need a limit of their own."""
    if max_tokens is not None and max_tokens < max_seq_len:
        raise invalid_request(f"'max_tokens' {max_tokens} is not supported: inputs are cut only at this model's limit "
                              f"of {max_seq_len} tokens; leave it out, or send at least {max_seq_len}", "max_tokens")


COHERE_EMBED = RouteSteps(CohereEmbedRequest, "embedding", _read, _answer)


async def cohere_embed(request: Request, state: State) -> CohereEmbedResponse | CohereEmbedFloatsResponse:
    return await serve_request(request, state, COHERE_EMBED)


ROUTES = [RouteSpec(cohere_embed, "POST", ("/v2/embed", "/v1/embed"), "Create embeddings (Cohere's embed)",
                    EMBEDDINGS_ERROR_RESPONSES, body=CohereEmbedRequest)]
