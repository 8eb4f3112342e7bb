"""One MiniLM feed-forward block (up projection, GELU, down projection, residual, LayerNorm) on the
CPU in bf16 and in int8 through inductor: does compiling the block fuse the activations'
quantization into the passes before each matmul, and what is left of the linears' speedup once
the block's other passes are counted?

    python bench/probes/cpu_int8_block.py --out bench/results/cpu/cpu-int8-block.md

Beside it, the share of the engine's bf16 CPU compute that its linears take (torch's profiler
over batches of 128 docstrings through `Engine`): what a faster linear can give at most.

Variants, each on the default model's layer-0 weights and real activations at M packed tokens:
bf16 eager (what the engine runs today), bf16 under torch.compile (max-autotune, freezing), and
int8 under torch.compile (max-autotune, freezing) with both linears as bench/probes/cpu_int8_ways.py's
OneDnnU8 (per-token symmetric uint8 activations, per-channel int8 weights). Rounds interleave
the variants and every M; the median and the fastest round are reported.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.lib.common import load_texts, machine_description, publish  # noqa: E402
from bench.probes.cpu_int8_paths import capture  # noqa: E402
from bench.probes.cpu_int8_ways import OneDnnU8  # noqa: E402


class Block(torch.nn.Module):
    """LayerNorm(down(gelu(up(x))) + x), the BERT layer's feed-forward half."""

    def __init__(self, up, down, norm, dtype, int8: bool):
        super().__init__()
        if int8:
            self.up, self.down = OneDnnU8(up.weight.detach(), up.bias.detach()), \
                OneDnnU8(down.weight.detach(), down.bias.detach())
        else:
            self.up, self.down = (torch.nn.Linear(m.in_features, m.out_features).to(dtype) for m in (up, down))
            self.up.load_state_dict(up.state_dict())
            self.down.load_state_dict(down.state_dict())
        self.norm = torch.nn.LayerNorm(norm.normalized_shape, eps=norm.eps).to(dtype)
        self.norm.load_state_dict(norm.state_dict())

    def forward(self, x):
        return self.norm(self.down(F.gelu(self.up(x))) + x)


LINEAR_OPS = ("aten::addmm", "aten::mm", "aten::linear", "aten::_addmm_activation", "mkldnn::_linear_pointwise")


def engine_shares(num_batches: int = 8) -> dict[str, float]:
    """Share of self CPU time per op group in the engine's bf16 forward passes on docstrings."""
    from torch.profiler import profile

    from rose_embed.engine.contract.config import EngineConfig
    from rose_embed.engine.rose.engine import Engine

    engine = Engine(EngineConfig(device="cpu", dtype="bfloat16"))
    texts = load_texts(2000 + 128 * num_batches)[2000:]
    batches = [texts[i:i + 128] for i in range(0, len(texts), 128)]
    engine.embed(batches[0])
    with profile() as prof:
        for batch in batches:
            engine.embed(batch)
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    share = lambda pick: sum(e.self_cpu_time_total for e in events if pick(e.key)) / total  # noqa: E731
    return {"linears": share(lambda k: k in LINEAR_OPS), "attention": share(lambda k: "attention" in k),
            "gelu": share(lambda k: k == "aten::gelu")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", default="512,2048,8192")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    torch._dynamo.config.cache_size_limit = 64
    import torch._inductor.config as inductor_config
    from sentence_transformers import SentenceTransformer

    from rose_embed.engine.model_files.loader import load_spec

    layer = SentenceTransformer(str(load_spec(None).path), device="cpu")[0].auto_model.encoder.layer[0]
    up, down, norm = layer.intermediate.dense, layer.output.dense, layer.output.LayerNorm
    tokens = [int(t) for t in args.tokens.split(",")]
    acts, _ = capture(load_texts(6000), max(tokens))
    x_all = acts["up"][0].to(torch.bfloat16)  # the block's input: the attention half's output
    variants = {}
    with torch.no_grad():
        for m in tokens:
            x = x_all[:m].contiguous()
            eager = Block(up, down, norm, torch.bfloat16, False).eval()
            variants[(m, "bf16 eager")] = (eager, x)
            for name, int8 in (("bf16 compiled", False), ("int8 compiled", True)):
                module = Block(up, down, norm, torch.bfloat16, int8).eval()
                compiled = torch.compile(module, mode="max-autotune", dynamic=False)
                with inductor_config.patch(freezing=True):
                    compiled(x)
                variants[(m, name)] = (compiled, x)
        reference = {m: Block(up, down, norm, torch.float32, False).eval()(x_all[:m].float()) for m in tokens}
        cosines = {key: float(F.cosine_similarity(fn(x).float(), reference[key[0]], dim=1).min())
                   for key, (fn, x) in variants.items()}
        reps = {}
        for key, (fn, x) in variants.items():
            start = time.perf_counter()
            fn(x)
            reps[key] = max(1, int(0.1 / max(time.perf_counter() - start, 1e-6)))
        samples = {key: [] for key in variants}
        keys = list(variants)
        for r in range(args.rounds):
            for key in keys[r % len(keys):] + keys[:r % len(keys)]:
                fn, x = variants[key]
                start = time.perf_counter()
                for _ in range(reps[key]):
                    fn(x)
                samples[key].append((time.perf_counter() - start) / reps[key] * 1e3)
    shares = engine_shares()
    lines = ["# A MiniLM feed-forward block on the CPU: bf16 against int8 through inductor", "",
             f"- command: `python bench/probes/cpu_int8_block.py {' '.join(sys.argv[1:])}`",
             f"- machine: {machine_description()}; {torch.get_num_threads()} threads; "
             f"date {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
             "- ms per call: median of the rounds (fastest round); x bf16 eager by the medians (by the fastest); "
             "min cos: the worst row's cosine to the block in fp32",
             "- the engine's bf16 CPU compute (batches of 128 docstrings, torch's profiler): "
             + ", ".join(f"{name} {value:.0%}" for name, value in shares.items()), "",
             "| M | variant | ms | x bf16 eager | min cos |", "|---|---|---|---|---|"]
    for (m, name), values in samples.items():
        base = samples[(m, "bf16 eager")]
        lines.append(f"| {m} | {name} | {statistics.median(values):.3f} ({min(values):.3f}) | "
                     f"{statistics.median(base) / statistics.median(values):.2f}x "
                     f"({min(base) / min(values):.2f}x) | {cosines[(m, name)]:.5f} |")
    publish("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
