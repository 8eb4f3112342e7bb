"""A Ray Data recipe: `ds.map_batches(RoseEmbedder, ...)` spreads a corpus over a cluster's GPUs.

    ds = ray.data.read_parquet("s3://bucket/texts/")
    ds = ds.map_batches(RoseEmbedder, fn_constructor_kwargs={"model": "BAAI/bge-base-en-v1.5"},
                        concurrency=8, num_gpus=1, batch_size=4096)
    ds.write_parquet("s3://bucket/vectors/")

Ray starts `concurrency` actors; each builds one engine (the model loads once per actor, on
the GPU Ray gave it) and is handed batches of rows. Nothing here imports Ray: the class is a
plain callable, so the core install needs no Ray (docs/corpus.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rose_embed.corpus.engine_setup import build_engine, prompt_for


class RoseEmbedder:
    """Adds a column of vectors (float32 [dim] per row, unit length) to each batch.

    `engine_options` are EngineConfig's fields: model, device, dtype, max_batch_tokens,
    max_batch_seqs, max_seq_len, num_threads, attention_backend, enforce_eager,
    fused_kernels, model_overrides. `prompt_name` picks one of the model's prompts (default: its default).
    """

    def __init__(self, text_column: str = "text", output_column: str = "embedding",
                 prompt_name: str | None = None, **engine_options: Any):
        self.text_column, self.output_column = text_column, output_column
        self.engine = build_engine(**engine_options)
        self.prompt = prompt_for(self.engine.spec, prompt_name)

    def __call__(self, batch):
        """batch: Ray's "numpy" format (a dict of column -> array) or a pandas DataFrame."""
        texts = list(batch[self.text_column])
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"{self.text_column!r} of row {i} of this batch is {type(text).__name__}, not str")
        vectors = self.engine.embed([self.prompt + t for t in texts] if self.prompt else texts)
        if isinstance(batch, dict):
            return {**batch, self.output_column: vectors}
        batch = batch.copy()  # pandas: one array per cell
        batch[self.output_column] = list(np.asarray(vectors))
        return batch
