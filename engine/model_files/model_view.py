"""ModelView: what a front end needs of the model, built once from its description.

The description (engine/model_files/loader.py's ModelSpec: limits, pooling, prompts, output size) and the
tokenizer, with the sizes requests are checked against; no weights and no device. The
server's front ends see the model only through it, whether the engines are processes
(server/links/engine_links.py) or an in-process Engine.
"""

from __future__ import annotations

import numpy as np

from rose_embed.engine.model_files.loader import ModelSpec
from rose_embed.engine.text.colbert_tokens import ColbertTokenizer
from rose_embed.engine.text.pairs import PairTokenizer
from rose_embed.engine.text.static_queries import StaticQueryEncoder
from rose_embed.engine.text.tokenizer import tokenizer_for, vocab_size_of


class ModelView:
    def __init__(self, spec: ModelSpec):
        self.spec = spec
        self.tokenizer = tokenizer_for(spec)
        # A reranker's inputs are (query, document) pairs, built as its reference builds them; a
        # classifier's may be pairs too.
        self.pairs = PairTokenizer(spec) if spec.kind != "embed" else None
        # An inference-free sparse encoder's queries are a lookup, not the model's (engine/text/static_queries.py).
        self.static_queries = None
        if spec.sparse is not None and spec.sparse.queries is not None:
            self.static_queries = StaticQueryEncoder(spec.sparse.queries, spec.sparse.max_active_dims)
        # A ColBERT model's queries and documents: one pooling segment per kept token (engine/text/colbert_tokens.py).
        self.colbert = ColbertTokenizer(self.tokenizer, spec.colbert) if spec.colbert is not None else None

    @property
    def dimensions(self) -> int:
        """The size of the vectors the model gives (after any Dense module and truncate_dim)."""
        return self.spec.embedding_dim

    @property
    def vocab_size(self) -> int:
        """Token ids below this are valid input."""
        return vocab_size_of(self.tokenizer, self.spec)

    def tokenize(self, texts: list[str]) -> list[np.ndarray]:
        return self.tokenizer.encode(texts)
