"""The packed attention on gpu_bench's documents, called a few times: the target of a
profiler that reads the kernel's own counters (Nsight Compute), to learn where its warps wait.

    ncu --kernel-name regex:_packed_attention_kernel --launch-skip 3 --launch-count 1 \
        --section WarpStateStats python3 bench/attention_stalls.py --model bert-base

The same inputs as bench/kernel_floors.py's "attention, documents" row (q, k and v as views
into one fused projection, the default launch).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.kernel_floors import SHAPES, attention_workloads, model_qkv, packed_backend  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="bert-base", choices=sorted(SHAPES))
    parser.add_argument("--workload", default="documents", choices=sorted(attention_workloads()))
    parser.add_argument("--calls", type=int, default=5)
    args = parser.parse_args()
    shape = SHAPES[args.model]
    lengths = attention_workloads()[args.workload].astype(np.int64)
    num_tokens = int(lengths.sum())
    q, k, v = model_qkv(shape, num_tokens)
    backend, meta = packed_backend(shape, lengths)
    for _ in range(args.calls):
        backend.forward(q, k, v, meta)
    torch.cuda.synchronize()
    print(f"{args.model}: {args.calls} calls on {num_tokens} tokens of {args.workload} ({len(lengths)} texts)")


if __name__ == "__main__":
    main()
