"""CLIP's vision tower: images/s of the engine alone against transformers' CLIPModel.get_image_features on the
same batches, in one run.

Random-weight checkpoints of ViT-B/16's and ViT-L/14's shapes (bench/lib/clip_models.py), each loaded by
Engine as a server loads it and warmed up (on a GPU that captures a CUDA graph per image-count bucket,
engine/rose/image_graphs.py). Both sides get the same preprocessed pixels, float32 [N, 3, S, S] on the host,
in the batches the queue cuts (or of --batch images): ours through the runner as the queue hands it a batch of images (launched
ahead, read back lazily; on the CPU in pieces of about 2,048 tokens), transformers' as its users call it
(`pixel_values.to(device, dtype)`, then the vectors back to the host once the pass ends), in the same dtype:
bf16 on a GPU; on the CPU the engine's default there (bf16 on a CPU that computes it natively) and float32.
Each side runs one untimed pass over every batch shape first; then the timed passes alternate between
the two, --repeats at least and --min-seconds each, and the medians count. Before any speed counts, the
engine's vectors of --check-images real (random) images are checked against the float32 reference on the
same pixels and device (cosine; a failure makes the run exit 1).

--http SHAPES (bench/lib/image_http.py): the same shapes served by the real server (`rose-embed serve --model
<checkpoint>`, default flags) to many clients sending base64 JPEG or PNG photo-like images, against the engine
alone on the same preprocessed images, every answer checked against the engine's; the front ends' CPU (where the
images are decoded and resized), the engines', the clients' and the machine's read over each steady window.

Targets (issue: images and text in one space): the engine >= 1.5x transformers on a GPU, >= 1.3x on the CPU;
through HTTP >= 0.8x the engine alone.

  python3 bench/images.py --device cuda --out bench/results/gpu/images.md
  python3 bench/images.py --device cuda --shapes none --http b16,l14 --out bench/results/http/http-images-gpu.md
  python3 bench/images.py --device cpu --shapes b16 --images 32 --out bench/results/cpu/cpu-images.md
  python3 bench/images.py --device cpu --shapes tiny --images 8 --batch 4 --repeats 2 --min-seconds 0   # smoke run
  python3 bench/images.py --device cpu --shapes none --http tiny --http-images 16 --http-size 96x72 \
      --http-clients 2 --http-procs 1 --http-rounds 1   # the HTTP arm's smoke run
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rose_embed.engine.contract.config import EngineConfig
from rose_embed.engine.image.preprocess import preprocess
from rose_embed.engine.rose.engine import Engine, resolve_device, resolve_dtype

from bench.lib.clip_models import SHAPES, write_clip
from bench.lib.common import cosine_rows, hardware, publish
from bench.lib.head_report import commit

TARGETS = {"cuda": 1.5, "cpu": 1.3}
# The least cosine of a vector to the float32 reference's: float32 differs in summation order only
# (tests/models/test_clip_models.py: 1e-4 per element), bf16 as tests/gpu/test_gpu.py states it.
MIN_COSINE = {torch.float32: 0.99999, torch.bfloat16: 0.999, torch.float16: 0.999}


def _synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def image_features(model, pixels: torch.Tensor) -> torch.Tensor:
    """get_image_features' vectors (transformers 5 returns them as an output's pooler_output)."""
    out = model.get_image_features(pixel_values=pixels)
    return out if isinstance(out, torch.Tensor) else out.pooler_output


def check(engine: Engine, reference_fp32, num_images: int, device: str) -> float:
    """The least cosine of the engine's vectors of `num_images` random images to the float32 reference's."""
    from PIL import Image

    rng = np.random.default_rng(1)
    images = [Image.fromarray(rng.integers(0, 256, (int(rng.integers(100, 400)), int(rng.integers(100, 400)), 3),
                                           dtype=np.uint8)) for _ in range(num_images)]
    pixels = np.stack([preprocess(image, engine.spec.clip.image) for image in images])
    with torch.inference_mode():
        expected = image_features(reference_fp32, torch.from_numpy(pixels).to(device)).float().cpu().numpy()
    return float(cosine_rows(engine.embed_images(pixels), expected).min())


def engine_pass(engine: Engine, batches: list[np.ndarray]) -> np.ndarray:
    """Every batch launched as the queue launches one, then read back."""
    seq_len = engine.spec.clip.image_seq_len
    results = [engine.runner.execute_images(batch, seq_len) for batch in batches]
    return np.concatenate([result.wait() for result in results])


def reference_pass(model, batches: list[np.ndarray], device: str, dtype: torch.dtype) -> np.ndarray:
    with torch.inference_mode():
        vectors = [image_features(model, torch.from_numpy(batch).to(device, dtype)) for batch in batches]
        return torch.cat(vectors).float().cpu().numpy()


def timed(fn, device: str) -> float:
    _synchronize(device)
    start = time.perf_counter()
    fn()
    _synchronize(device)
    return time.perf_counter() - start


def bench_arm(shape: str, path: Path, dtype_name: str, reference_fp32, args) -> dict:
    """One shape in one dtype: the check, then both sides' passes alternated."""
    from transformers import CLIPModel

    engine = Engine(EngineConfig(model=str(path), device=args.device, dtype=dtype_name))
    engine.warm_up()
    dtype = engine.dtype
    cosine = check(engine, reference_fp32, args.check_images, args.device)
    reference = reference_fp32 if dtype == torch.float32 else \
        CLIPModel.from_pretrained(str(path), dtype=dtype).to(args.device).eval()
    size = engine.spec.clip.image_size
    pixels = np.random.default_rng(0).standard_normal((args.images, 3, size, size), dtype=np.float32)
    config = engine.config
    batch = min(args.images, args.batch or min(config.max_batch_seqs,
                                               config.max_batch_tokens // engine.spec.clip.image_seq_len))
    batches = [pixels[lo: lo + batch] for lo in range(0, args.images, batch)]
    runner = engine.runner

    def ours():
        engine_pass(engine, batches)

    def theirs():
        reference_pass(reference, batches, args.device, dtype)

    ours(), theirs()  # every batch shape once, untimed
    before = (runner.num_graph_replays, runner.num_eager_runs, runner.num_capture_failures)
    times: dict[str, list[float]] = {"engine": [], "transformers": []}
    while len(times["engine"]) < args.repeats or sum(times["engine"]) < args.min_seconds:
        times["engine"].append(timed(ours, args.device))
        times["transformers"].append(timed(theirs, args.device))
    after = (runner.num_graph_replays, runner.num_eager_runs, runner.num_capture_failures)
    rates = {side: args.images / statistics.median(seconds) for side, seconds in times.items()}
    row = {"shape": shape, "dtype": str(dtype).removeprefix("torch."), "tokens": engine.spec.clip.image_seq_len,
           "batch": batch,
           "passes": len(times["engine"]), "cosine": cosine, "min_cosine": MIN_COSINE[dtype],
           "counters": tuple(b - a for a, b in zip(before, after)), **rates,
           "spread": {side: (args.images / max(s), args.images / min(s)) for side, s in times.items()}}
    print(f"# {shape} {row['dtype']}: engine {rates['engine']:,.1f} images/s, transformers "
          f"{rates['transformers']:,.1f}, {rates['engine'] / rates['transformers']:.2f}x; check cosine {cosine:.6f}",
          flush=True)
    return row


def render(rows: list[dict], http_rows: list[dict], args) -> str:
    from bench.lib.image_http import HTTP_TARGET
    from bench.lib.image_http_report import http_tables

    arms = [*(["the engine alone against transformers' get_image_features"] if rows else []),
            *(["over HTTP against the engine alone"] if http_rows else [])]
    threads = "" if args.device.startswith("cuda") else f"; {torch.get_num_threads()} torch threads"
    lines = [f"# Images: CLIP's vision tower, {' and '.join(arms)}", "",
             f"- command: `python3 bench/images.py {' '.join(args.argv)}`",
             f"- machine: {hardware(args.device)}{threads}",
             f"- commit {commit()}; date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"]
    if rows:
        lines += transformers_table(rows, args)
    return "\n".join(lines + http_tables(http_rows, args, HTTP_TARGET) + [""])


def transformers_table(rows: list[dict], args) -> list[str]:
    target = TARGETS["cuda" if args.device.startswith("cuda") else "cpu"]
    lines = [(f"- random weights (bench/lib/clip_models.py); {args.images} images a pass in batches of the size shown, "
              "float32 pixels on the host for both sides, vectors read back to the host; median of the timed passes "
              f"(alternating between the sides); the check on {args.check_images} random images against "
              "transformers in float32 on the same device"),
             "", ("| shape | tokens/image | batch | dtype | engine images/s | transformers images/s | ratio | target | "
                  "check: least cosine (bar) | passes | timed passes: graph replays / eager runs / capture failures |"),
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = r["engine"] / r["transformers"]
        passed = r["cosine"] >= r["min_cosine"]
        verdict = f">= {target} " + ("MET" if ratio >= target else "NOT MET") if passed else \
            "not counted: its check FAILED"
        replays, eager, failures = r["counters"]
        lines.append(f"| {r['shape']} | {r['tokens']} | {r['batch']} | {r['dtype']} | {r['engine']:,.1f} | {r['transformers']:,.1f} | "
                     f"{ratio:.2f} | {verdict} | {r['cosine']:.6f} ({r['min_cosine']}) | {r['passes']} | "
                     f"{replays} / {eager} / {failures} |")
    lines += ["", "Spread of the timed passes (images/s, slowest to fastest): " + "; ".join(
        f"{r['shape']} {r['dtype']}: engine {r['spread']['engine'][0]:,.1f} to {r['spread']['engine'][1]:,.1f}, "
        f"transformers {r['spread']['transformers'][0]:,.1f} to {r['spread']['transformers'][1]:,.1f}"
        for r in rows)]
    return lines


def parse_args(argv: list[str] | None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="b16,l14", help=f"vision towers timed against transformers, of "
                        f"{', '.join(SHAPES)} (none: only --http's)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtypes", default=None, help="EngineConfig dtypes, each an arm (default: auto on a GPU, "
                        "auto,float32 on the CPU; auto is bf16 on a GPU and on a CPU that computes it natively)")
    parser.add_argument("--images", type=int, default=None, help="images a pass (default 1,024 on a GPU, 64 on the CPU)")
    parser.add_argument("--batch", type=int, default=None, help="images a batch (default: as many as the queue cuts "
                        "a batch of, the default budget of 16,384 tokens over the image's tokens: 83 of ViT-B/16, "
                        "63 of ViT-L/14)")
    parser.add_argument("--check-images", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5, help="timed passes of each side, at least")
    parser.add_argument("--min-seconds", type=float, default=2.0, help="and as many more as fill this long")
    http = parser.add_argument_group("the HTTP arm (bench/lib/image_http.py)")
    http.add_argument("--http", default="", help="vision towers served over HTTP against the engine alone "
                      "(comma-separated; default none)")
    http.add_argument("--http-images", type=int, default=None, help="images a round (default 8,192 on a GPU, 32 "
                      "on the CPU)")
    http.add_argument("--http-distinct", type=int, default=8, help="distinct images, sent over and over")
    http.add_argument("--http-size", type=_size, default=(640, 480), help="the images' WIDTHxHEIGHT")
    http.add_argument("--http-formats", default="jpeg", help="the distinct images' file formats, in turn (jpeg, png)")
    http.add_argument("--http-request-images", type=int, default=8, help="images a request, at most")
    http.add_argument("--http-answer-formats", default="float,base64", help="encoding formats drawn per request")
    http.add_argument("--http-clients", type=int, default=64, help="connections, spread over --http-procs")
    http.add_argument("--http-procs", type=int, default=4, help="client processes")
    http.add_argument("--http-rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else argv
    args.shapes = [] if args.shapes == "none" else args.shapes.split(",")
    args.http = [s for s in args.http.split(",") if s]
    if unknown := [s for s in args.shapes + args.http if s not in SHAPES]:
        parser.error(f"--shapes/--http: unknown {', '.join(unknown)}; choose from {', '.join(SHAPES)}")
    from bench.lib.photos import FORMATS

    args.http_formats = args.http_formats.split(",")
    if unknown := [f for f in args.http_formats if f not in FORMATS]:
        parser.error(f"--http-formats: unknown {', '.join(unknown)}; choose from {', '.join(FORMATS)}")
    gpu = args.device.startswith("cuda")
    args.dtypes = (args.dtypes or ("auto" if gpu else "auto,float32")).split(",")
    args.images = args.images or (1024 if gpu else 64)
    args.http_images = args.http_images or (8192 if gpu else 32)
    return args


def _size(value: str) -> tuple[int, int]:
    try:
        width, height = (int(part) for part in value.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not WIDTHxHEIGHT, e.g. 640x480") from None
    if width < 1 or height < 1:
        raise argparse.ArgumentTypeError(f"{value!r}: both sides must be at least 1 pixel")
    return width, height


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from transformers import CLIPModel

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    print(f"# on {hardware(args.device)}: {args.images} images a pass", flush=True)
    # auto resolved, so that a CPU whose auto is float32 runs that arm once
    dtypes = list(dict.fromkeys(str(resolve_dtype(name, resolve_device(args.device))[0]).removeprefix("torch.")
                                for name in args.dtypes))
    rows, http_rows = [], []
    with tempfile.TemporaryDirectory(prefix="images-") as tmp:
        for shape in dict.fromkeys(args.shapes + args.http):
            path = write_clip(Path(tmp) / shape, SHAPES[shape])
            if shape in args.shapes:
                reference_fp32 = CLIPModel.from_pretrained(str(path), dtype=torch.float32).to(args.device).eval()
                for dtype in dtypes:
                    rows.append(bench_arm(shape, path, dtype, reference_fp32, args))
                    if args.device.startswith("cuda"):
                        torch.cuda.empty_cache()  # the arm's engine and reference are gone
                del reference_fp32
            if shape in args.http:
                from bench.lib.image_http import bench_http

                http_rows.append(bench_http(shape, path, args))
                if args.device.startswith("cuda"):
                    torch.cuda.empty_cache()  # the arm's engine is gone
    publish(render(rows, http_rows, args), args.out)
    failed = [f"{r['shape']} {r['dtype']}" for r in rows if r["cosine"] < r["min_cosine"]]
    failed += [f"{r['shape']} over HTTP" for r in http_rows if r["failures"]]
    if failed:
        print(f"FAILED: {', '.join(failed)} answered wrongly; their speed counts for nothing", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
