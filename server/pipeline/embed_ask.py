"""An embeddings request as the pipeline reads it, whichever wire it came in on (OpenAI's, Cohere's,
TEI's): its texts or token ids (or, for a CLIP model, texts and images), the formats and size of its
vectors, its prompt and long-inputs mode.

Its parts are server/pipeline/embed_parts.py's (and image_parts.py's); each part's vectors are checked
finite and written in every format asked for as soon as they land.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from rose_embed.compat.inputs import NormalisedInput
from rose_embed.compat.vector_wire import encode_vectors
from rose_embed.server.http.errors import APIError
from rose_embed.server.http.trace import RequestTrace
from rose_embed.server.pipeline.compute_request import PartMaker
from rose_embed.server.pipeline.embed_parts import is_large_request, text_parts, token_id_parts
from rose_embed.server.pipeline.guards import check_finite, check_input_chars
from rose_embed.server.pipeline.image_parts import check_images, mixed_parts
from rose_embed.server.pipeline.long_inputs import context_length_error, long_inputs_mode
from rose_embed.server.pipeline.options import check_dimensions, check_encoding_format
from rose_embed.server.pipeline.prompts import resolve_prompt
from rose_embed.server.pipeline.request_cost import request_cost
from rose_embed.server.pipeline.request_pipeline import Outcome
from rose_embed.server.pipeline.served_models import ServedModel
from rose_embed.server.pipeline.serving import Serving
from rose_embed.server.pipeline.token_inputs import TokenInputs


@dataclass
class EmbedAsk:
    inputs: NormalisedInput
    param: str = "input"  # the field that held the inputs, as errors name it
    formats: tuple[str, ...] = ("float",)  # each part's vectors are written in each of these
    format_param: str | None = "encoding_format"  # the field that asked for them; None: the route checked them
    dimensions: int | None = None
    dimensions_param: str = "dimensions"
    prompt_name: str | None = None
    input_type: str | None = None
    long_inputs: str | None = None  # the request's mode; None: the server's --long-inputs
    too_long: Callable[[int, int], APIError] = context_length_error  # the wire's words for an input past the limit
    own_vectors: bool = False  # the model's own vectors, cut to `dimensions` but not re-normalised (TEI's)
    priority: int | None = None
    _prompt: str = field(default="", init=False)
    _mode: str = field(default="", init=False)
    _is_large: bool = field(default=False, init=False)

    def check(self, serving: Serving, model: ServedModel, trace: RequestTrace) -> int:
        spec = model.view.spec
        if self.format_param is not None:
            check_encoding_format(model.formats, self.formats[0], self.format_param)
        check_dimensions(spec, self.dimensions, self.dimensions_param)
        self._prompt = resolve_prompt(spec.prompts, spec.default_prompt_name, self.prompt_name, self.input_type)
        self._mode = long_inputs_mode(serving.config.long_inputs, self.long_inputs)
        texts, token_ids, items = self.inputs.texts, self.inputs.token_ids, self.inputs.items
        trace.num_inputs = len(items if items is not None else texts if texts is not None else token_ids)
        self._is_large = is_large_request(trace.num_inputs)
        if items is not None:
            check_images(model, self.inputs, self.param)
            texts = [item if isinstance(item, str) else "" for item in items]  # each text at its own index
        if texts is not None:
            check_input_chars(texts, serving.config.max_input_chars, is_chunked=self._mode == "chunk",
                              param=self.param)
        return request_cost(self.inputs, spec.max_seq_len, self._mode == "chunk", model.image_seq_len)

    async def parts(self, serving: Serving, model: ServedModel, trace: RequestTrace,
                    token_inputs: TokenInputs) -> list[PartMaker]:
        """Token ids are decoded (--token-ids cl100k) only now: a request the queue has no room for
        costs nothing more."""
        sent = self.inputs
        finish = partial(self._finish, serving, model, trace)
        if sent.items is not None:
            return mixed_parts(serving, model, sent.items, self._prompt, self._mode, finish, self.too_long,
                               self._is_large, self.param)
        inputs = await token_inputs.decode_token_ids(sent)
        config = serving.config
        if inputs.texts is None:
            token_inputs.check_token_ids(inputs.token_ids, model.view.vocab_size)
            return token_id_parts(serving, model, inputs.token_ids, self._mode, finish)
        if sent.token_ids is not None:  # texts decoded from cl100k ids
            check_input_chars(inputs.texts, config.max_input_chars, is_chunked=self._mode == "chunk",
                              token_ids=sent.token_ids)
        trace.texts = inputs.texts if config.log_inputs else None
        return text_parts(serving, model, inputs.texts, self._prompt, self._mode, finish, self.too_long)

    def parts_ahead(self, serving: Serving, model: ServedModel) -> int | None:
        return None

    async def _finish(self, serving: Serving, model: ServedModel, trace: RequestTrace,
                      vectors: np.ndarray) -> list[list]:
        """A part's vectors in each format asked for."""
        check_finite(vectors, trace.request_id)
        if self.own_vectors:  # cut as sentence-transformers' truncate_dim cuts them: not re-normalised
            return [encode_vectors(vectors[:, :self.dimensions], "float")]
        if len(self.formats) == 1:
            return [await serving.encode(vectors, self.formats[0], self.dimensions, self._is_large, model)]
        return await asyncio.gather(*(serving.encode(vectors, name, self.dimensions, self._is_large, model)
                                      for name in self.formats))

    def result(self, outcome: Outcome, trace: RequestTrace) -> list[list]:
        """Per format asked for, every input's vector, in order."""
        return [[row for answer in outcome.answers for row in answer[k]] for k in range(len(self.formats))]
