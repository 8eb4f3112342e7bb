"""An inference-free sparse encoder's queries: a fixed weight per token id, and no model.

sentence-transformers' SparseStaticEmbedding (the query route of engine/model_files/sparse_router.py)
tokenizes a query with its own tokenizer, without special tokens and cut at the tokenizer's
model_max_length, and gives each token id the query holds its weight (an IDF, as opensearch trained
them), however often it occurs; the other dimensions are 0. Computed here as it is there, on the host
where the query is tokenized: a lookup in a table of V floats needs no device, so a query costs its
tokenization only.
"""

from __future__ import annotations

import numpy as np

from rose_embed.engine.contract.sparse_rows import SparseRow
from rose_embed.engine.model_files.json_files import read_json_object
from rose_embed.engine.model_files.load_error import ModelLoadError
from rose_embed.engine.model_files.sparse_router import StaticQueries
from rose_embed.engine.model_files.tokenizer_file import read_tokenizer

# transformers' stand-in for "no limit" in tokenizer_config.json's model_max_length.
_NO_LIMIT = 10**9


class StaticQueryEncoder:
    """Texts -> each one's (token id, weight) pairs; safe to call from several threads (the Rust tokenizer is)."""

    def __init__(self, queries: StaticQueries, max_active_dims: int | None = None):
        from safetensors.numpy import load_file

        folder = queries.folder
        self._tokenizer = read_tokenizer(folder / "tokenizer.json")
        self._tokenizer.no_padding()
        limit = (read_json_object(folder / "tokenizer_config.json") or {}).get("model_max_length")
        if isinstance(limit, int) and limit < _NO_LIMIT:
            self._tokenizer.enable_truncation(max_length=limit)
        else:
            self._tokenizer.no_truncation()
        try:
            self._weights = load_file(str(folder / "model.safetensors"))["weight"].astype(np.float32)
        except (OSError, KeyError) as exc:
            raise ModelLoadError(f"{folder}: the static query weights ('weight' in model.safetensors) do not load: "
                                 f"{exc}") from exc
        self._max_active_dims = max_active_dims

    def encode(self, texts: list[str]) -> list[SparseRow]:
        rows = []
        for encoding in self._tokenizer.encode_batch(texts, add_special_tokens=False):
            indices = np.unique(np.asarray(encoding.ids, dtype=np.int64))
            values = self._weights[indices]
            present = values != 0
            indices, values = indices[present], values[present]
            num_active = len(indices)
            if self._max_active_dims is not None and num_active > self._max_active_dims:
                # encode's top-k: the largest by magnitude, kept in index order
                kept = np.sort(np.argsort(-np.abs(values), kind="stable")[: self._max_active_dims])
                indices, values = indices[kept], values[kept]
            rows.append(SparseRow(indices, values, num_active))
        return rows
