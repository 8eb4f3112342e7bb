"""ROSE: the engine that runs a model on packed, padding-free batches (engine.py is its facade).

Grouped inside: models/ (one file per architecture), layers/ (norms, rotary, the fused steps
between the matmuls, pooling and the sentence head), attention/ (the attention backends and the
choice among them), quantization/ (FP8 and int8: plans, support checks, their layers and
kernels). Runs in an engine process, driven by its queue (engine/queue/), or in any program that
uses `Engine` as a library (the corpus job, Ray, the benchmarks). Imports nothing of the queue,
the server or the contract's process plumbing (tests/package/test_import_layers.py).
"""
