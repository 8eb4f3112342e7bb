"""What the request pipeline asks of the runtime: which model a request names, where its texts are
tokenized and its vectors encoded, how large its pieces and how many of its parts at once.

The runtime (server/runtime.py) is this and its lifecycle (loading, the engines, the part
processes); these are the pipeline's own steps, kept beside the pipeline so that a request's
walk stays inside one package.
"""

from __future__ import annotations

import numpy as np

from rose_embed.compat.encoding import encode_embeddings
from rose_embed.engine.contract.memory import HeapTrimmer
from rose_embed.server.config import ServerConfig
from rose_embed.server.links.engine_links import EngineLinks
from rose_embed.server.pipeline.aliases import ModelNames, model_names
from rose_embed.server.pipeline.image_fetch import ImageFetcher
from rose_embed.server.pipeline.part_process_client import PartProcesses
from rose_embed.server.pipeline.priority_pool import LARGE, SMALL, PriorityPool
from rose_embed.server.pipeline.request_pipeline import PART_TEXTS, RAMP_TEXTS
from rose_embed.server.pipeline.served_models import ServedModel
from rose_embed.server.processes.part_processes import ENCODED_FORMATS

# Up to this many characters a request is tokenized on the event loop (well under a millisecond
# on the fast path); longer ones go to a thread so that other requests are not held up.
_INLINE_TOKENIZE_CHARS = 16_384
# A part's texts at most where the part processes take the parts: enough parts that the device
# gets the request's tokens in a stream, not all at the end.
_MOST_PART_TEXTS = 256


class Serving:
    """The runtime as the request pipeline uses it; the runtime sets these attributes."""

    config: ServerConfig
    models: list[ServedModel]
    engines: EngineLinks | None
    is_ready: bool
    tokenizer_pool: PriorityPool
    heap_trimmer: HeapTrimmer
    part_processes: PartProcesses | None
    image_fetcher: ImageFetcher  # image inputs given as http(s) URLs
    _key_weights: dict[str, float]

    @property
    def names(self) -> ModelNames:
        first, *others = (m.name for m in self.models)
        return model_names(first, self.config.model_aliases, self.config.strict_model_names, tuple(others))

    def pick(self, asked: str | None, kind: str | tuple[str, ...] | None = None) -> ServedModel:
        """The model a request's `model` names; the 404 that lists every id otherwise. A request that
        names none, or one of OpenAI's or Cohere's names, gets the first model of the `kind` its route
        serves ("embedding", "rerank", "classify" or "sparse_embedding"; of several, the first kind that one
        serves), else the first model (whose route check then says why not)."""
        names = self.names
        name = names.resolve(asked)
        if kind is not None and (asked is None or asked in names.implicit):
            kinds = (kind,) if isinstance(kind, str) else kind
            name = next((m.name for k in kinds for m in self.models if m.kind == k), name)
        return next(m for m in self.models if m.name == name)

    def engine_problem(self) -> str | None:
        """Why the engines cannot serve (dead or stuck), or None."""
        return self.engines.problem() if self.is_ready else None

    @property
    def batch_budget(self) -> tuple[int, int]:
        """A piece's most tokens and vectors: the engines' batch budget, as their warm-up chose it."""
        engine = self.config.engine
        return (self.engines.max_batch_tokens or engine.max_batch_tokens), engine.max_batch_seqs

    def key_weight(self, request) -> float:
        """The weight `--api-keys-file` gives the request's key (1 for any other key, or none)."""
        if not self._key_weights:
            return 1.0
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        return self._key_weights.get(token.strip(), 1.0) if scheme.lower() == "bearer" else 1.0

    def parts_ahead(self, model: ServedModel) -> int:
        """Parts of a request to make ready at once: twice what the part processes can take, so that
        each has its next part waiting; one where the parts are tokenized in place."""
        if not self._uses_part_processes(model):
            return 1
        return 2 * self.part_processes.num_processes

    def part_texts(self, model: ServedModel, num_texts: int) -> int:
        """Texts per part of a large request after its first small ones: where the part processes
        take the parts, one part per process (within bounds), since every part costs this front
        end a round trip to a process each way, more than a process takes to tokenize it."""
        if not self._uses_part_processes(model):
            return PART_TEXTS
        per_process = -(-max(0, num_texts - sum(RAMP_TEXTS)) // self.part_processes.num_processes)
        return min(max(per_process, PART_TEXTS), _MOST_PART_TEXTS)

    def _uses_part_processes(self, model: ServedModel) -> bool:
        processes = self.part_processes
        return (model.index == 0 and processes is not None and processes.is_usable
                and model.tokenizes_holding_the_gil)

    async def tokenize(self, texts: list[str], is_large_request: bool = False,
                       model: ServedModel | None = None) -> list[np.ndarray]:
        """Tokenize with `model`'s tokenizer (None: the first model's) off the event loop where that
        runs in parallel with it (the Rust tokenizer releases the GIL, part processes run side by
        side for a large request's parts) or would hold it up; a small request in Python is cheaper
        in place."""
        model = model or self.models[0]
        view = model.view
        if is_large_request and self._uses_part_processes(model):
            seqs = await self.part_processes.tokenize(texts)
            if seqs is not None:
                return seqs
        if model.tokenizes_holding_the_gil and sum(map(len, texts)) <= _INLINE_TOKENIZE_CHARS:
            return view.tokenize(texts)
        return await self.tokenizer_pool.run(LARGE if is_large_request else SMALL, view.tokenize, texts)

    async def tokenize_pairs(self, query: str, documents: list[str], max_doc_tokens: int | None,
                             is_large_request: bool, model: ServedModel):
        """A reranker's (query, document) pairs as its reference builds them (engine/text/pairs.py),
        always in a thread (the Rust tokenizer releases the GIL), a large request's after any small one's."""
        return await self.tokenizer_pool.run(LARGE if is_large_request else SMALL, model.view.pairs.encode, query,
                                             documents, max_doc_tokens)

    async def tokenize_each_pair(self, pairs: list[tuple[str, str]], is_large_request: bool, model: ServedModel):
        """A classifier's pairs of texts (engine/text/pairs.py), each cut as a cross-encoder's pair is,
        in a tokenizer thread as a reranker's are."""
        return await self.tokenizer_pool.run(LARGE if is_large_request else SMALL, model.view.pairs.encode_each, pairs)

    async def tokenize_whole(self, model: ServedModel, text: str, add_special_tokens: bool) -> list[int]:
        """One text's ids, never truncated (/tokenize), in a tokenizer thread (a text of many thousand
        characters takes a while), behind any request's own tokenizing."""
        tokenizer = model.view.tokenizer
        return (await self.tokenizer_pool.run(LARGE, tokenizer.encode_untruncated, [text], add_special_tokens))[0]

    async def detokenize(self, model: ServedModel, ids: list[int]) -> str:
        """Ids back to text (/detokenize), in a tokenizer thread (millions of ids take seconds), behind
        any request's own tokenizing."""
        return await self.tokenizer_pool.run(LARGE, model.view.tokenizer.decode_releasing_gil, ids)

    async def encode(self, vectors: np.ndarray, encoding_format: str, dimensions: int | None,
                     is_large_request: bool = False, model: ServedModel | None = None) -> list:
        """The vectors as the request's `encoding_format` and `dimensions` ask (compat/encoding.py):
        a large request's parts in the part processes, side by side, where the format costs more
        than the round trip (ENCODED_FORMATS); anything else in place."""
        is_normalized = (model or self.models[0]).normalizes
        if is_large_request and self.part_processes is not None and encoding_format in ENCODED_FORMATS:
            encoded = await self.part_processes.encode(vectors, encoding_format, dimensions, is_normalized)
            if encoded is not None:
                return encoded
        return encode_embeddings(vectors, encoding_format, dimensions, is_normalized)
