"""The parts of a rerank request: its (query, document) pairs, a part's worth of documents each.

Every pair is one sequence, built as the model's reference builds it (engine/text/pairs.py) and
tokenized where the runtime tokenizes (Serving.tokenize_pairs); the engine hands back
[score, raw logit] per pair, and a part's answer is those two columns. The request pipeline
(server/pipeline/request_pipeline.py) computes the parts as it computes any other route's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial

from rose_embed.server.pipeline.embed_parts import is_large_request
from rose_embed.server.pipeline.request_cost import input_cost
from rose_embed.server.pipeline.request_pipeline import ReadyPart, part_bounds
from rose_embed.server.pipeline.serving import Serving
from rose_embed.server.pipeline.served_models import ServedModel

PartMaker = Callable[[], Awaitable[ReadyPart]]


def pair_parts(runtime: Serving, model: ServedModel, query: str, documents: list[str], max_doc_tokens: int | None,
               check_truncated: Callable[[int], None] | None = None) -> list[PartMaker]:
    """`check_truncated(index)`: called with the request-wide index of the first document whose pair
    was cut at the model's limit, where the route refuses that rather than cut (TEI's `truncate`)."""
    is_large = is_large_request(len(documents))
    return [partial(_pairs_part, runtime, model, query, documents[lo:hi], lo, max_doc_tokens, is_large,
                    check_truncated)
            for lo, hi in part_bounds(len(documents))]


def pairs_ahead(runtime: Serving) -> int:
    """Parts whose pairs are tokenized at once: one per tokenizer thread, so that the next ones are
    ready when the device wants them."""
    return runtime.config.tokenizer_workers


def pairs_cost(query: str, documents: list[str], max_seq_len: int) -> int:
    """The queue's estimate of a rerank request's tokens: a pair costs its query and document
    together, cut at the model's limit."""
    return sum(input_cost(len(query) + len(document), max_seq_len, is_chunked=False) for document in documents)


async def _pairs_part(runtime: Serving, model: ServedModel, query: str, documents: list[str], first: int,
                      max_doc_tokens: int | None, is_large: bool, check_truncated) -> ReadyPart:
    pairs = await runtime.tokenize_pairs(query, documents, max_doc_tokens, is_large, model)
    if check_truncated is not None and pairs.truncated:
        check_truncated(first + pairs.truncated[0])
    return ReadyPart(pairs.seqs, lambda rows: rows[:, :2].copy())
