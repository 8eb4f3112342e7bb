"""What each int8 activation scheme does to all-MiniLM-L6-v2's vectors, simulated: every linear of
the encoder (24) runs on quantized-then-dequantized weights (int8 per output channel, symmetric)
and activations (the scheme's), everything else as in sentence-transformers. Quality is what
bench/cpu_compare.py measures: cosine of every vector to sentence-transformers fp32's, and how
many of each query's top-10 passages agree. The kernels of bench/probes/cpu_int8_paths.py compute these schemes exactly
(int32 accumulation), so the ways of one scheme land here together.

    python bench/probes/cpu_int8_model_quality.py --out bench/results/cpu/cpu-int8-model-quality.md

Passages: 1,200 texts of 4 consecutive docstrings each from tests/data/stdlib_docstrings.jsonl;
queries: 200 single docstrings from further on; the static scheme's ranges and SmoothQuant's
channel maxima are calibrated on 300 other docstrings. Short queries against passages of four
docstrings make many near ties: top-10 agreement here is harsher than on bench/cpu_compare.py's
single paragraphs (bf16 alone agrees 0.983 here), so compare schemes within this table.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.lib.common import DEFAULT_DATA, build_texts, load_texts, machine_description, publish  # noqa: E402
from rose_embed.engine.rose.quantization.int8_plan import SMOOTHQUANT_ALPHA as SMOOTH_ALPHA  # noqa: E402  (the engine's)
from rose_embed.engine.rose.quantization.int8 import smoothing_factors  # noqa: E402

NUM_PASSAGES, NUM_QUERIES, NUM_CALIBRATION = 1200, 200, 300
QUERIES_FROM, CALIBRATION_FROM = 6000, 8000  # docstring indexes, past the passages' 4,800


def _per_token(x):
    scale = x.abs().amax(-1, keepdim=True).clamp(min=1e-12) / 127
    return torch.round(x / scale).clamp(-127, 127) * scale


def _per_token_asym(x):
    low, high = x.amin(-1, keepdim=True), x.amax(-1, keepdim=True)
    scale = ((high - low) / 255).clamp(min=1e-12)
    zero = torch.round(-low / scale)
    return (torch.round(x / scale + zero).clamp(0, 255) - zero) * scale


def _per_tensor_dynamic(x, rows):
    """uint8 with a zero point over the whole batch's real tokens (DynamicQuantizeLinear, fbgemm)."""
    real = x[rows]
    low, high = real.min().clamp(max=0), real.max().clamp(min=0)
    scale = ((high - low) / 255).clamp(min=1e-12)
    zero = torch.round(-low / scale)
    return (torch.round(x / scale + zero).clamp(0, 255) - zero) * scale


def _groups(x, size=32):
    shape = x.shape
    g = x.reshape(*shape[:-1], shape[-1] // size, size)
    return _per_token(g).reshape(shape)


SMOOTHED = ("qkv", "up")  # the linears right after a LayerNorm, which can take the smoothing for free

ALL = ("qkv", "o", "up", "down")

# scheme: (quantize-dequantize activations (x, rows, calibrated bound, kind), kinds smoothed, kinds quantized)
SCHEMES = {
    "per-token symmetric (the plan)": (lambda x, rows, bound, kind: _per_token(x), (), ALL),
    f"per-token symmetric, SmoothQuant (alpha {SMOOTH_ALPHA}) on qkv and up": (
        lambda x, rows, bound, kind: _per_token(x), SMOOTHED, ALL),
    "per-token symmetric, down projection asymmetric": (lambda x, rows, bound, kind: (
        _per_token_asym(x) if kind == "down" else _per_token(x)), (), ALL),
    "per-tensor dynamic uint8 (fbgemm, ONNX Runtime quantize_dynamic)": (
        lambda x, rows, bound, kind: _per_tensor_dynamic(x, rows), (), ALL),
    "per-tensor static, calibrated absmax (OpenVINO static)": (
        lambda x, rows, bound, kind: torch.round(x / (bound / 127)).clamp(-127, 127) * (bound / 127), (), ALL),
    "groups of 32 along K (OpenVINO dynamic's default)": (lambda x, rows, bound, kind: _groups(x), (), ALL),
    # where the error comes from: one kind of linear quantized (per token), the others as they were
    **{f"per-token symmetric, {kind} only": (lambda x, rows, bound, kind: _per_token(x), (), (kind,))
       for kind in ALL},
}


def _weight_int8(w):
    scale = w.abs().amax(1, keepdim=True).clamp(min=1e-12) / 127
    return torch.round(w / scale).clamp(-127, 127) * scale


class FakeQuant:
    """Replaces each encoder linear's forward; `scheme` None runs it as it was.

    SmoothQuant divides each input channel j by s_j = max|X_j|^a / max|W_j|^(1-a) (X's maximum
    calibrated, W's over q, k and v together where fused) and multiplies W's column j by it.
    In BERT's post-norm layers the LayerNorm output before qkv and up also feeds the residual,
    so the division cannot be folded into the LayerNorm: it is one multiply per element in the
    pass that quantizes the activations."""

    def __init__(self, bert):
        self.scheme, self.calibrating, self.mask = None, False, None
        self.bounds, self.channels, self.weight_channels, self.weights = {}, {}, {}, {}
        for i, layer in enumerate(bert.encoder.layer):
            for kind, module in (("qkv", layer.attention.self.query), ("qkv", layer.attention.self.key),
                                 ("qkv", layer.attention.self.value), ("o", layer.attention.output.dense),
                                 ("up", layer.intermediate.dense), ("down", layer.output.dense)):
                column = module.weight.detach().float().abs().amax(0)
                self.weight_channels[(kind, i)] = torch.maximum(self.weight_channels.get((kind, i), column), column)
                module.forward = self._forward(module, (kind, i))

    def _smoothing(self, key) -> torch.Tensor:
        # The engine's rule, given a weight row of the column maxima (q, k and v's together).
        return smoothing_factors(self.channels[key], self.weight_channels[key][None, :], SMOOTH_ALPHA)

    def _forward(self, module, key):
        original = module.forward

        def forward(x):
            rows = self.mask if self.mask is not None and self.mask.shape == x.shape[:-1] else ...
            if self.calibrating:
                real = x[rows].detach().float().abs().reshape(-1, x.shape[-1])
                self.bounds[key] = max(self.bounds.get(key, 0.0), float(real.max()))
                self.channels[key] = torch.maximum(self.channels.get(key, real.amax(0)), real.amax(0))
            if self.scheme is None:
                return original(x)
            activations, smoothed, quantized = SCHEMES[self.scheme]
            if key[0] not in quantized:
                return original(x)
            s = self._smoothing(key) if key[0] in smoothed else torch.ones(x.shape[-1])
            if (id(module), self.scheme) not in self.weights:
                self.weights[(id(module), self.scheme)] = _weight_int8(module.weight.detach().float() * s)
            xq = activations(x.float() / s, rows, self.bounds.get(key), key[0]).to(x.dtype)
            return F.linear(xq, self.weights[(id(module), self.scheme)].to(x.dtype), module.bias)
        return forward


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--schemes", default="", help="only the schemes whose name holds this text")
    parser.add_argument("--dtypes", default="float32,bfloat16", help="what the rest of the model runs in")
    parser.add_argument("--engines", default="",
                        help="also rose-embed's Engine on the CPU, comma-separated: int8 (compiled), int8-eager, "
                             "bfloat16; with --schemes none, only these")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from sentence_transformers import SentenceTransformer

    from rose_embed.engine.model_files.loader import load_spec

    model = SentenceTransformer(str(load_spec(None).path), device="cpu")
    passages = build_texts(DEFAULT_DATA, NUM_PASSAGES, 4)
    docstrings = load_texts(CALIBRATION_FROM + NUM_CALIBRATION)
    queries = docstrings[QUERIES_FROM:QUERIES_FROM + NUM_QUERIES]
    calibration = docstrings[CALIBRATION_FROM:]
    fake = FakeQuant(model[0].auto_model)
    tokenize = model.tokenize

    def tokenize_and_mask(texts):  # the real tokens of each batch, for per-tensor ranges
        features = tokenize(texts)
        fake.mask = features["attention_mask"].bool()
        return features
    model.tokenize = tokenize_and_mask

    def encode(texts):
        return model.encode(texts, batch_size=32, convert_to_numpy=True, normalize_embeddings=True)

    fake.calibrating = True
    encode(calibration)
    fake.calibrating = False
    reference = encode(passages + queries)
    rows = [engine_row(name, passages + queries, reference) for name in filter(None, args.engines.split(","))]
    if args.schemes == "none":
        publish(report(rows), args.out)
        return
    names = [n for n in SCHEMES if args.schemes in n]
    for name in names:
        fake.scheme = name
        for dtype in (getattr(torch, d) for d in args.dtypes.split(",")):
            model.to(dtype)
            vectors = encode(passages + queries).astype(np.float32)
            model.to(torch.float32)
            rows.append((name, str(dtype).removeprefix("torch."), *quality(vectors, reference)))
            print(rows[-1], flush=True)
    fake.scheme = None
    if "bfloat16" not in args.dtypes:
        publish(report(rows), args.out)
        return
    model.to(torch.bfloat16)
    rows.append(("none (bf16 model, no int8)", "bfloat16", *quality(encode(passages + queries).astype(np.float32),
                                                                    reference)))
    publish(report(rows), args.out)


ENGINES = {"int8": {"quantization": "int8"}, "int8-eager": {"quantization": "int8", "enforce_eager": True},
           "bfloat16": {}}


def engine_row(name: str, texts: list[str], reference: np.ndarray) -> tuple:
    """The quality row of rose-embed's Engine in bf16 with ENGINES[name]'s settings (SmoothQuant's
    factors calibrated on the engine's built-in texts, not on this script's)."""
    from rose_embed.engine.contract.config import EngineConfig
    from rose_embed.engine.rose.engine import Engine

    engine = Engine(EngineConfig(device="cpu", dtype="bfloat16", **ENGINES[name]))
    engine.warm_up()
    row = (f"rose-embed Engine, {name}", "bfloat16", *quality(engine.embed(texts), reference))
    print(row, flush=True)
    return row


def quality(vectors: np.ndarray, reference: np.ndarray, num_passages: int = NUM_PASSAGES
            ) -> tuple[float, float, float]:
    """(mean cosine, min cosine, top-10 agreement of the queries over the passages): rows
    [:num_passages] are the passages, the rest the queries."""
    cos = (vectors * reference).sum(1) / np.linalg.norm(vectors, axis=1) / np.linalg.norm(reference, axis=1)

    def top10(v):
        return np.argsort(-(v[num_passages:] @ v[:num_passages].T), axis=1)[:, :10]
    got, want = top10(vectors), top10(reference)
    agreement = np.mean([len(set(g) & set(w)) / 10 for g, w in zip(got, want)])
    return float(cos.mean()), float(cos.min()), float(agreement)


def report(rows) -> str:
    lines = [
        "# int8 on all-MiniLM-L6-v2 against sentence-transformers fp32: activation schemes simulated, "
        "rose-embed's Engine as it runs",
        "",
        f"- command: `python bench/probes/cpu_int8_model_quality.py {' '.join(sys.argv[1:])}`",
        f"- machine: {machine_description()}; date {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"- {NUM_PASSAGES:,} passages (4 docstrings each) and {NUM_QUERIES} single-docstring queries from "
        "tests/data/stdlib_docstrings.jsonl; weights int8 per output channel in every scheme; every encoder linear "
        "quantized; 'rest in' is the dtype of everything else (and of the dequantized operands)",
        "- the bar for `--quantization int8`: mean >= 0.995, min >= 0.98, top-10 >= 0.94 "
        "(OpenVINO int8 through sentence-transformers: 0.99753, 0.97912, 0.937)",
        "",
        "| activations | rest in | mean cos | min cos | top-10 agreement |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| {name} | {dtype} | {mean:.5f} | {low:.5f} | {top:.3f} |" for name, dtype, mean, low, top in rows]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
