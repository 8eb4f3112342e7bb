"""The engine side, and what both sides share. Which process runs each sub-package:

- contract/: the contract between the front ends and the engines (config, packed batches, messages,
  the shared-memory arena and board, the interface the server uses) and the process plumbing
  every process of the server shares. Imported by every process.
- queue/: Tulip, the queue of one device. Runs in that device's engine process.
- rose/: ROSE, the engine that runs the model on packed batches. Runs in an engine process (or in
  the process of a program that uses `Engine` as a library: the corpus job, Ray, the benchmarks).
- model_files/, text/ and image/: what a model's directory says and how its texts become token ids
  and its images pixels, without torch. Imported by every process that knows the model, front ends
  included.

Tensors and token ids only: nothing here knows HTTP, JSON or Litestar.
"""
