"""The model layers that are neither attention nor quantization: norms, rotary, the fused
memory-bound steps between the matmuls, pooling and the sentence and score heads. Runs where ROSE
runs: in an engine process.
"""
