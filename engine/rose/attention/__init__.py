"""Ragged attention over a packed stream: the interface (ragged.py), the CPU and CUDA backends,
the factory over them (backends.py) and the per-batch-class choice by timing (choice.py, timing.py).
Runs where ROSE runs: in an engine process.
"""
