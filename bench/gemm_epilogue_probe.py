"""Can a GEMM of our own carry the passes between cuBLAS's matmuls? A Triton GEMM against cuBLAS.

    python3 bench/gemm_epilogue_probe.py --out bench/results/gemm-epilogue-probe.md   # needs a CUDA device

The Qwen3 shape's goal needs the passes between its matmuls folded into the matmuls
(docs/gpu.md, "Where a batch's time goes"), and cuBLAS's epilogues have none of them. This
times, at the top bucket's 16,384 tokens in bf16, one Triton GEMM (TMA loads, wgmma on sm_90,
a few tile configurations, the best kept; one program a tile, and persistent: one program an
SM) against cuBLAS on the layers' own shapes:
  - plain: the same product as cuBLAS, to read Triton's rate against cuBLAS's;
  - SwiGLU in the epilogue (the Qwen3 shape's gate-up projection): two accumulators, one for
    the gate's columns and one for the up's, and silu(gate) * up stored, [T, I] instead of the
    [T, 2I] that cuBLAS writes and the SiLU-and-mul pass reads again; against the engine's
    cuBLAS matmul + Triton SiLU-and-mul (fused.silu_and_mul).
Each output is checked against float32 (max abs error, and the engine's path's beside it).
Times are CUDA-event medians of repeated calls after warm-up.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import cuda_event_ms, publish  # noqa: E402

# (name, K, N): N is the output's width; for SwiGLU the projection is 2N wide (gate | up).
SHAPES = {
    "qwen3 gate-up + SwiGLU": (1024, 3072, "swiglu"),
    "qwen3 qkv": (1024, 4096, "plain"),
    "qwen3 down": (3072, 1024, "plain"),
    "bert-base up": (768, 3072, "plain"),
    "bert-base down": (3072, 768, "plain"),
}
# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages)
CONFIGS = [(128, 128, 64, 8, 3), (128, 128, 64, 8, 4), (128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (128, 64, 64, 4, 4),
           (64, 128, 64, 4, 4), (128, 128, 128, 8, 2)]


@triton.jit
def _tile_origin(tile, num_m, num_n, GROUP_M: tl.constexpr):
    # Tiles in groups of GROUP_M rows, so that neighbouring programs share B's blocks in L2.
    group = tile // (GROUP_M * num_n)
    first_m = group * GROUP_M
    size_m = tl.minimum(num_m - first_m, GROUP_M)
    return first_m + (tile % (GROUP_M * num_n)) % size_m, (tile % (GROUP_M * num_n)) // size_m


@triton.jit
def _gemm_tile(a_desc, b_desc, c_desc, m0, n0, K, UP_OFFSET, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_K: tl.constexpr, SWIGLU: tl.constexpr, NUM_STAGES: tl.constexpr):
    # C [M, N] = A [M, K] @ B[:N]^T, B in nn.Linear's layout [out, in]. With SWIGLU, B holds the
    # gate's rows then the up's (from UP_OFFSET) and C = silu(A @ gate^T) * (A @ up^T).
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    if SWIGLU:
        up = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k in tl.range(0, K, BLOCK_K, num_stages=NUM_STAGES):
        a = a_desc.load([m0, k])
        acc = tl.dot(a, tl.trans(b_desc.load([n0, k])), acc)
        if SWIGLU:
            up = tl.dot(a, tl.trans(b_desc.load([UP_OFFSET + n0, k])), up)
    if SWIGLU:
        acc = acc / (1.0 + tl.exp(-acc)) * up
    c_desc.store([m0, n0], acc.to(c_desc.dtype))


@triton.jit
def _gemm_kernel(a_desc, b_desc, c_desc, M, N, K, UP_OFFSET,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                 SWIGLU: tl.constexpr, NUM_STAGES: tl.constexpr):
    # One program a tile.
    pm, pn = _tile_origin(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    _gemm_tile(a_desc, b_desc, c_desc, pm * BLOCK_M, pn * BLOCK_N, K, UP_OFFSET, BLOCK_M, BLOCK_N, BLOCK_K, SWIGLU,
               NUM_STAGES)


@triton.jit
def _persistent_gemm_kernel(a_desc, b_desc, c_desc, M, N, K, UP_OFFSET,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                            GROUP_M: tl.constexpr, SWIGLU: tl.constexpr, NUM_STAGES: tl.constexpr,
                            NUM_PROGRAMS: tl.constexpr):
    # One program an SM, taking tiles in turn: Triton's form of a persistent GEMM on Hopper
    # (its warp specialisation needs Blackwell), where one tile's loads overlap the last's epilogue.
    num_m, num_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    for tile in tl.range(tl.program_id(0), num_m * num_n, NUM_PROGRAMS):
        pm, pn = _tile_origin(tile, num_m, num_n, GROUP_M)
        _gemm_tile(a_desc, b_desc, c_desc, pm * BLOCK_M, pn * BLOCK_N, K, UP_OFFSET, BLOCK_M, BLOCK_N, BLOCK_K,
                   SWIGLU, NUM_STAGES)


def triton_gemm(x, weight, out_features: int, swiglu: bool, config, persistent: bool = False) -> "torch.Tensor":
    """x [M, K] @ weight^T -> [M, out_features]; with swiglu, weight is [2 * out_features, K]."""
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    block_m, block_n, block_k, num_warps, num_stages = config
    m, k = x.shape
    out = torch.empty(m, out_features, device=x.device, dtype=x.dtype)
    a_desc = TensorDescriptor(x, [m, k], [x.stride(0), 1], [block_m, block_k])
    b_desc = TensorDescriptor(weight, list(weight.shape), [weight.stride(0), 1], [block_n, block_k])
    c_desc = TensorDescriptor(out, [m, out_features], [out.stride(0), 1], [block_m, block_n])
    tiles = triton.cdiv(m, block_m) * triton.cdiv(out_features, block_n)
    options = dict(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=8, SWIGLU=swiglu,
                   NUM_STAGES=num_stages, num_warps=num_warps)
    up_offset = out_features if swiglu else 0
    if persistent:
        programs = min(tiles, torch.cuda.get_device_properties(x.device).multi_processor_count)
        _persistent_gemm_kernel[(programs,)](a_desc, b_desc, c_desc, m, out_features, k, up_offset,
                                             NUM_PROGRAMS=programs, **options)
    else:
        _gemm_kernel[(tiles,)](a_desc, b_desc, c_desc, m, out_features, k, up_offset, **options)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    import torch
    import torch.nn.functional as F

    from engine.rose.layers import fused

    if not torch.cuda.is_available():
        sys.exit("gemm_epilogue_probe: needs a CUDA device")
    torch.manual_seed(0)
    rows = ["| shape | path | ms | TFLOP/s | x cuBLAS path | max abs error vs fp32 | config (BM, BN, BK, warps, stages) |",
            "|---|---|---:|---:|---:|---:|---|"]
    for name in args.shapes.split(","):
        k, n, kind = SHAPES[name]
        swiglu = kind == "swiglu"
        width = 2 * n if swiglu else n
        x = torch.randn(args.tokens, k, device="cuda", dtype=torch.bfloat16)
        weight = torch.randn(width, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
        full = F.linear(x.float(), weight.float())
        exact = F.silu(full[:, :n]) * full[:, n:] if swiglu else full
        del full
        flops = 2 * args.tokens * k * width

        def cublas_path():
            out = F.linear(x, weight)
            return fused.silu_and_mul(out) if swiglu else out

        def triton_paths(out_features: int, epilogue: bool, suffix: str) -> list:
            return [("Triton" + (" persistent" if persistent else "") + suffix,
                     lambda c=config, p=persistent: triton_gemm(x, weight, out_features, epilogue, c, p), config)
                    for persistent in (False, True) for config in CONFIGS]

        paths = [("cuBLAS" + (" + SiLU-and-mul pass" if swiglu else ""), cublas_path, "-"),
                 *triton_paths(n, swiglu, ", SwiGLU in the epilogue" if swiglu else "")]
        if swiglu:  # the plain product too: Triton's rate on this shape without the epilogue
            paths += [("cuBLAS, plain [T, 2I]", lambda: F.linear(x, weight), "-"),
                      *triton_paths(width, False, ", plain [T, 2I]")]
        timed = []
        for label, fn, config in paths:
            try:
                out = fn()
                reference = exact if out.shape[1] == n else F.linear(x.float(), weight.float())
                error = (out.float() - reference).abs().max().item()
                ms = cuda_event_ms(fn, args.repeats)
            except Exception as exc:  # a configuration that does not fit (shared memory): reported
                print(f"{name}: {label} {config}: {type(exc).__name__}: {exc}", flush=True)
                continue
            timed.append((label, ms, error, config))
            print(f"{name}: {label} {config}: {ms:.3f} ms, max abs error {error:.4f}", flush=True)
        base = timed[0][1]
        best = {}
        for label, ms, error, config in timed:
            if label not in best or ms < best[label][0]:
                best[label] = (ms, error, config)
        for label, (ms, error, config) in best.items():
            rows.append(f"| {name} | {label} | {ms:.3f} | {flops / ms / 1e9:.0f} | {ms / base:.2f} | {error:.4f} | "
                        f"{config} |")
    report = "\n".join([
        "# A Triton GEMM against cuBLAS, plain and with SwiGLU in its epilogue",
        "",
        f"- command: `python3 bench/gemm_epilogue_probe.py {' '.join(sys.argv[1:] if argv is None else argv)}`",
        f"- GPU: {torch.cuda.get_device_name()}; torch {torch.__version__}; triton {triton.__version__}; "
        f"date {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"- {args.tokens} tokens, bf16, random weights; the best of {len(CONFIGS)} tile configurations per path; "
        "TFLOP/s counts the projection's FLOPs (2 x T x K x width)",
        "",
        *rows,
    ])
    publish(report + "\n", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
