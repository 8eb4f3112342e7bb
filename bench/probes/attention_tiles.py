"""The packed attention kernel's launch settings, swept on the H200: tile sizes, warps, stages,
whether key blocks inside every row's sequence skip the mask, (GQA) whether a tile serves
every query head of a key/value head, whether the softmax's scale goes into the exponent's
FMA, a cap on the registers per thread (how many tiles an SM holds at once), and whether
key/value blocks come through TMA descriptors.

    python3 bench/probes/attention_tiles.py --out bench/results/gpu/attention-tiles.md
    python3 bench/probes/attention_tiles.py --models bert-base --tiles 64x64,64x128 --fold-scale both
    python3 bench/probes/attention_tiles.py --around-default --stages 2,3 --max-registers none,128,96 --fold-scale both

For each model shape (MiniLM, BERT-base, the Qwen3-0.6B shape) and each class of batch that
`auto` times (16,384 and 2,048 tokens; sequences of up to 128 and 512), one layer's attention
in microseconds per call, timed as `auto` times it (engine/rose/attention/timing.py: CUDA graphs of
many calls, best of several replays). The default's row is marked; the fastest setting per
class is in bold. Only the launch changes: the outputs are checked equal to the default's.

Results in bench/results/ (`bench/gpu_session.sh sweep` runs the second):
  attention-tiles.md                  python3 bench/probes/attention_tiles.py
  attention-tiles-around-defaults.md  python3 bench/probes/attention_tiles.py --models bert-base,qwen3-0.6b,minilm
                                          --around-default --stages 3 --max-registers none,128 --fold-scale both
                                          --tma-loads both
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import sys
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.lib.common import publish  # noqa: E402
from rose_embed.engine.rose.attention.timing import AttentionTimer, padded_cu_seqlens  # noqa: E402
from rose_embed.engine.rose.attention.ragged import AttentionShape  # noqa: E402
from rose_embed.engine.rose.attention.cuda import PackedAttentionBackend  # noqa: E402
from rose_embed.engine.rose.attention.packed import Tiles, default_tiles  # noqa: E402

SHAPES = {
    "minilm": AttentionShape(num_heads=12, num_kv_heads=12, head_dim=32, is_causal=False),
    "bert-base": AttentionShape(num_heads=12, num_kv_heads=12, head_dim=64, is_causal=False),
    "qwen3-0.6b": AttentionShape(num_heads=16, num_kv_heads=8, head_dim=128, is_causal=True),
}
CLASSES = [(16384, 128), (16384, 512), (2048, 128), (2048, 512)]
# (BLOCK_M, BLOCK_N). Tiles of 16 and 32 rows span fewer sequences: a tile's rows each see only
# their own sequence's keys, but the tile computes scores for every key of all its sequences.
TILES = [(16, 32), (16, 64), (32, 32), (32, 64), (64, 64), (64, 32), (128, 64), (128, 32)]
WARPS = {16: [1, 2], 32: [2, 4], 64: [4, 8], 128: [4, 8]}  # per BLOCK_M
STAGES = "3,4"  # 2 was slower everywhere in the first sweep (before register caps)
MAX_SEQS = 1024


def same_output(shape: AttentionShape, tiles: Tiles, reference: Tiles) -> bool:
    cu_host = padded_cu_seqlens(2048, 512, MAX_SEQS)
    cu = torch.tensor(cu_host, dtype=torch.int32, device="cuda")
    g = torch.Generator(device="cuda").manual_seed(1)
    q = torch.randn(2048, shape.num_heads, shape.head_dim, generator=g, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(2048, shape.num_kv_heads, shape.head_dim, generator=g, device="cuda", dtype=torch.bfloat16)
            for _ in range(2))
    outs = []
    for setting in (tiles, reference):
        backend = PackedAttentionBackend(shape, tiles=setting)
        outs.append(backend.forward(q, k, v, backend.prepare(cu, cu_host, 512)).float())
    return bool(torch.allclose(outs[0], outs[1], atol=2e-2, rtol=0))


def label(tiles: Tiles) -> str:
    return (f"{tiles.block_m}x{tiles.block_n}, warps {tiles.num_warps or '-'}, stages {tiles.num_stages or '-'}"
            + ("" if tiles.mask_inner_blocks else ", inner masks skipped")
            + (", kv heads shared" if tiles.share_kv_heads else "")
            + (", scale folded" if tiles.fold_scale else "")
            + (f", at most {tiles.max_registers} registers" if tiles.max_registers else "")
            + (", TMA loads" if tiles.tma_loads else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--models", default=",".join(SHAPES), help="comma-separated, of " + ", ".join(SHAPES))
    parser.add_argument("--tiles", default=None,
                        help="BLOCK_MxBLOCK_N settings to sweep, comma-separated (default: all of TILES)")
    parser.add_argument("--fold-scale", default="off", choices=["off", "on", "both"],
                        help="the scale folded into the exponent, in the swept settings (the default's row flips it anyway)")
    parser.add_argument("--tma-loads", default="off", choices=["off", "on", "both"],
                        help="key/value blocks through TMA descriptors, in the swept settings (the default's row flips it anyway)")
    parser.add_argument("--stages", default=STAGES, help="num_stages values swept, comma-separated")
    parser.add_argument("--max-registers", default="none",
                        help="register caps per thread swept (Triton's maxnreg), comma-separated; none: the compiler's")
    parser.add_argument("--around-default", action="store_true",
                        help="keep the default's tile, warps, mask and head sharing; sweep only stages, register "
                             "caps, scale folding and TMA loads")
    args = parser.parse_args()
    choice = {"off": (False,), "on": (True,), "both": (False, True)}
    folds, tmas = choice[args.fold_scale], choice[args.tma_loads]
    stages_swept = [int(x) for x in args.stages.split(",")]
    caps = [None if x == "none" else int(x) for x in args.max_registers.split(",")]
    tiles_swept = TILES if args.tiles is None else [tuple(int(x) for x in t.split("x")) for t in args.tiles.split(",")]
    lines = ["# The packed attention kernel's launch settings", "",
             f"- command: `python3 bench/probes/attention_tiles.py {' '.join(sys.argv[1:])}`",
             f"- GPU: {torch.cuda.get_device_name()}; torch {torch.__version__}; date {datetime.date.today()}",
             "- bf16; us per layer call as `auto` times it; BLOCK_M x BLOCK_N, num_warps, num_stages (`-`: the "
             "launcher's default), and whether key blocks inside every row's sequence skip the mask; `*`: the "
             "engine's default setting; bold: the fastest per class", ""]
    for name in args.models.split(","):
        shape = SHAPES[name]
        default = default_tiles(shape.head_dim, shape.num_heads // shape.num_kv_heads)
        shares = (False, True) if shape.num_kv_heads < shape.num_heads else (False,)
        settings = [default, replace(default, mask_inner_blocks=not default.mask_inner_blocks),
                    replace(default, fold_scale=not default.fold_scale),
                    replace(default, tma_loads=not default.tma_loads)]
        if args.around_default:
            settings += [replace(default, num_stages=stages, fold_scale=fold, max_registers=cap, tma_loads=tma)
                         for stages, fold, cap, tma in itertools.product(stages_swept, folds, caps, tmas)]
        else:
            settings += [Tiles(m, n, w, stages, mask, share, fold, cap, tma)
                         for (m, n), stages, mask, share, fold, cap, tma in itertools.product(
                             tiles_swept, stages_swept, (True, False), shares, folds, caps, tmas)
                         for w in WARPS[m]]
        settings = list(dict.fromkeys(settings))  # the default's own row once
        timer = AttentionTimer(shape, torch.bfloat16, torch.device("cuda"), 16384, MAX_SEQS)
        times: dict[Tiles, list[float | None]] = {}
        for tiles in settings:
            row = []
            for num_tokens, max_seqlen in CLASSES:
                try:
                    row.append(timer(PackedAttentionBackend(shape, tiles=tiles), num_tokens, max_seqlen))
                except Exception as exc:  # a setting that does not compile or fit: left out, not fatal
                    print(f"{name} {label(tiles)}: {type(exc).__name__}: {str(exc)[:120]}", flush=True)
                    row.append(None)
            times[tiles] = row
            print(name, label(tiles), [None if t is None else round(1e6 * t, 1) for t in row], flush=True)
        del timer
        best = [min((t[i] for t in times.values() if t[i] is not None), default=None) for i in range(len(CLASSES))]
        lines += [f"## {name} (head_dim {shape.head_dim}, {shape.num_heads} heads, {shape.num_kv_heads} kv heads"
                  f"{', causal' if shape.is_causal else ''})", "",
                  "| setting | " + " | ".join(f"{t} tok, <= {s}" for t, s in CLASSES) + " | sum | output = default's |",
                  "| --- |" + " ---: |" * (len(CLASSES) + 1) + " --- |"]
        ranked = sorted(times.items(), key=lambda item: sum(t if t is not None else 1.0 for t in item[1]))
        shown = dict(ranked[:16])
        shown.setdefault(default, times[default])
        for tiles, row in shown.items():
            cells = ["-" if t is None else (f"**{1e6 * t:.1f}**" if t == best[i] else f"{1e6 * t:.1f}")
                     for i, t in enumerate(row)]
            total = "-" if None in row else f"{1e6 * sum(row):.1f}"
            check = "yes" if tiles == default else ("yes" if same_output(shape, tiles, default) else "NO")
            lines.append(f"| {label(tiles)}{' *' if tiles == default else ''} | " + " | ".join(cells)
                         + f" | {total} | {check} |")
        lines.append("")
        torch.cuda.empty_cache()
        publish("\n".join(lines) + "\n", args.out)  # after each shape: a call cut short keeps the shapes done


if __name__ == "__main__":
    main()
