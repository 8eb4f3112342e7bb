"""Corpus embedding: files of texts in, files of vectors out, resumable (docs/corpus.md).

`job.run_job` drives the engine directly (no HTTP) over a JSONL or Parquet file, chunk by
chunk, committing each finished chunk before starting on the next one; `ray_embedder`
wraps the same engine for Ray Data's `map_batches`. Imports go one way: `server` (the CLI)
-> `corpus` -> `engine`. Runs in the process of `rose-embed embed` (or of a Ray worker), beside
the engine it drives.
"""
