"""Quantization: FP8 on Hopper and int8 on the CPU. For each, where it can run (*_support.py,
support.py, asked by the CLI before anything starts), which layers it turns (*_plan.py), its
layers and kernels, and its calibration. Runs where ROSE runs: in an engine process (the CLI
imports the support checks alone).
"""
