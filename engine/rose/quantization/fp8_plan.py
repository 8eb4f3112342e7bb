"""Which linear layers of a model run as FP8 GEMMs (--quantization fp8), and making them so.

FP8 pays where a GEMM is large enough for Hopper's FP8 tensor cores to beat bf16's by more
than the quantized copies of its input cost to write, and costs quality in every layer it
touches; so the plan says, per model and per linear layer, which run FP8 (bench/results/fp8/README.md has the
measurements behind each default and how to measure them again):

- a model narrower than `min_hidden_size` keeps every layer bf16: its GEMMs are small, and FP8
  beats bf16 on them (1.05x on MiniLM's) by less than the norms' second copies cost;
- the first `bf16_first_layers` and last `bf16_last_layers` layers stay bf16: in a model whose
  residual stream runs through every layer unnormalised (pre-norm, as Qwen3), a rounding error
  made early passes through every later layer, so the first layers cost the most quality per
  layer and little of the time. By default the count follows the width there: one layer on
  models narrower than `attention_output_min_hidden_size` (their o_proj stays bf16 too, and
  with GPTQ the Qwen3-0.6B shape holds the quality bounds with one, where each more bf16 layer
  costs it speed it cannot spare), two on wider ones and the attention's linears of the third
  (`bf16_attention_first_layers`; the Qwen3-4B shape's vectors move twice as far with one bf16
  layer as with three). An early layer's attention weighs more on the vectors than its MLP, which
  holds most of the layer's arithmetic: on the Qwen3-4B shape the three first layers' attention
  linears in FP8 cost more quality than their MLPs, and the third layer's MLP in FP8 keeps the
  quality bounds where its whole layer in FP8 does not. A model that normalises after each
  residual add (post-norm: the BERT family, `normalises_each_residual`) keeps none: the first layers' error
  does not carry so (on the simulated BERT-base shape a bf16 first layer moves min cosine from
  0.99822 to 0.99833), and its bf16 layer costs BERT-base about 2% of its speed. The last layer
  stays FP8: in bf16 it bought nothing measurable on the Qwen3 shapes, and the simulated MiniLM
  held the quality bound with it in FP8. `edge_bf16_linears` keeps only the kinds it names bf16
  in those layers (on the Qwen3-4B shape neither the attention's nor the MLP's linears alone hold
  the quality), and `bf16_linears` keeps whole kinds of linear bf16 everywhere instead; the
  benchmark's plans measure what each buys;
- the attention's output projection (o_proj) stays bf16 on models narrower than
  `attention_output_min_hidden_size`. Its input comes from the attention kernels, which cannot
  quantize it (a row's scale needs every head of the token), so FP8 there needs a quantizing
  pass of its own, which its GEMM pays for only on wide models; and on a narrower model its
  rounding weighs more on the vectors than its share of the time (on the Qwen3-0.6B shape,
  o_proj bf16 moves the vectors closer to float32 than a fourth bf16 layer does, at about the
  same speed);
- with `bf16_pooled_tokens`, a model that pools one token (last-token pooling, as
  Qwen3-Embedding; CLS) computes that token's rows of every FP8 linear in bf16 as well and keeps
  them: the vector is that token's final state, and its own path carries much of the rounding
  that reaches it (engine/rose/quantization/fp8.py's PooledTokens), for one GEMM row per segment. By
  default on models from `attention_output_min_hidden_size` wide: with its bf16 first layers the
  Qwen3-4B shape reaches the quality bounds only so (more bf16 layers would cost it more speed),
  while the narrower Qwen3-0.6B holds them without and could not spare the speed;
- a layer whose shape torch._scaled_mm cannot take stays bf16;
- with `one_scale_up_projections`, a model that names the norm before a linear whose output an
  activation reads (`fp8_one_scale_inputs`: the BERT family's up projection, after the attention's
  norm) runs that linear at one scale per operand, each bounded at load (Fp8Linear's
  `input_norm`): then cuBLASLt's GEMM applies the bias and GELU and writes the down projection's
  e4m3 input itself, where scales per row need the GEMM's bf16 output and a pass of its own to
  activate and quantize it, which cost BERT-base its FP8 gain on the MLP. The linear that reads
  that output (`fp8_one_scale_after`: the down projection) takes it at its one scale, and so its
  weight at one scale too: torch._scaled_mm's tensorwise GEMM, a little faster than its rowwise one.

Each FP8 weight's e4m3 value is chosen by GPTQ (`weight_rounding`, engine/rose/quantization/fp8_gptq.py)
where the caller can run the unquantized model on texts, else rounded to nearest.
"""

from __future__ import annotations

import time
from typing import Callable

from torch import nn

from rose_embed.engine.contract.config import (NARROW_BF16_FIRST_LAYERS, POST_NORM_BF16_FIRST_LAYERS, WIDE_BF16_ATTENTION_FIRST_LAYERS,
                           WIDE_BF16_FIRST_LAYERS, Fp8Plan)
from rose_embed.engine.rose.quantization.fp8_gptq import calibration_texts, gptq_weights
from rose_embed.engine.rose.quantization.fp8 import Fp8Linear, PooledTokens, fits_fp8
from rose_embed.engine.rose.layers.pooling import ONE_TOKEN_MODES
from rose_embed.engine.rose.quantization.module_swap import replace_submodule


ATTENTION_LINEARS = ("qkv_proj", "o_proj")


def is_attention_output(name: str) -> bool:
    return name.rsplit(".", 1)[-1] == "o_proj"


def hidden_size_of(model: nn.Module) -> int:
    return next(m.out_features for n, m in model.layers[0].named_modules() if is_attention_output(n))


def is_wide(plan: Fp8Plan, hidden_size: int) -> bool:
    """Whether a model this wide takes the wide models' defaults: o_proj FP8, the pooled tokens'
    rows bf16, more bf16 first layers."""
    return hidden_size >= plan.attention_output_min_hidden_size


def bf16_first_layers(plan: Fp8Plan, hidden_size: int, post_norm: bool = False) -> int:
    """How many layers at the start of a model this wide (post-norm: normalising after each
    residual add) the plan keeps bf16."""
    if plan.bf16_first_layers is not None:
        return plan.bf16_first_layers
    if post_norm:
        return POST_NORM_BF16_FIRST_LAYERS
    return WIDE_BF16_FIRST_LAYERS if is_wide(plan, hidden_size) else NARROW_BF16_FIRST_LAYERS


def bf16_attention_first_layers(plan: Fp8Plan, hidden_size: int, post_norm: bool = False) -> int:
    """How many layers at the start of a model this wide keep at least their attention's linears
    bf16 (the whole bf16 first layers among them)."""
    first = bf16_first_layers(plan, hidden_size, post_norm)
    if plan.bf16_attention_first_layers is not None:
        return max(first, plan.bf16_attention_first_layers)
    if plan.bf16_first_layers is None and not post_norm and is_wide(plan, hidden_size):
        return max(first, WIDE_BF16_ATTENTION_FIRST_LAYERS)
    return first


def is_post_norm(model: nn.Module) -> bool:
    return getattr(model, "normalises_each_residual", False)


def bf16_first_layer_counts(model: nn.Module, plan: Fp8Plan) -> tuple[int, int]:
    """(whole layers, layers with at least their attention's linears) the plan keeps bf16 at the
    start of this model."""
    hidden_size, post_norm = hidden_size_of(model), is_post_norm(model)
    return (bf16_first_layers(plan, hidden_size, post_norm),
            bf16_attention_first_layers(plan, hidden_size, post_norm))


def keeps_pooled_tokens(plan: Fp8Plan, hidden_size: int) -> bool:
    """Whether the plan keeps the pooled tokens' rows bf16 on a model this wide (where it pools one token)."""
    if plan.bf16_pooled_tokens is not None:
        return plan.bf16_pooled_tokens
    return is_wide(plan, hidden_size)


def fp8_linear_names(model: nn.Module, plan: Fp8Plan) -> list[str]:
    """The names (as model.named_modules gives them) of the linear layers the plan turns to FP8."""
    layers = list(model.layers)
    if not layers:
        return []
    hidden_size = hidden_size_of(model)
    if hidden_size < plan.min_hidden_size:
        return []
    first, attention_first = bf16_first_layer_counts(model, plan)
    names = []
    for index, layer in enumerate(layers):
        at_edge = index < first or index >= len(layers) - plan.bf16_last_layers
        if at_edge and plan.edge_bf16_linears is None:
            continue
        for name, module in layer.named_modules():
            kind = name.rsplit(".", 1)[-1]
            if not fits_fp8(module) or kind in plan.bf16_linears or (at_edge and kind in plan.edge_bf16_linears):
                continue
            if index < attention_first and kind in ATTENTION_LINEARS:
                continue
            if is_attention_output(name) and not is_wide(plan, hidden_size):
                continue
            names.append(f"layers.{index}.{name}")
    return names


def pooled_tokens_for(model: nn.Module, plan: Fp8Plan, pooling: str | None) -> PooledTokens | None:
    """The PooledTokens the model's FP8 linears share where the plan keeps the pooled tokens bf16,
    the head pools one token, and the model's producers hand on those tokens' rows; else None."""
    if (keeps_pooled_tokens(plan, hidden_size_of(model)) and pooling in ONE_TOKEN_MODES
            and getattr(model, "fp8_pooled_tokens_supported", False)):
        return PooledTokens()
    return None


def pooled_tokens_of(model: nn.Module) -> PooledTokens | None:
    """What quantize_model left for the runner to fill with each batch's pooled rows, if anything."""
    return getattr(model, "fp8_pooled_tokens", None)


def one_scale_linears(model: nn.Module, plan: Fp8Plan, names: list[str]) -> dict[str, nn.Module | None]:
    """The linears among `names` the plan runs at one scale per operand -> the norm whose output is
    their input (the model's `fp8_one_scale_inputs`: kind of linear -> its layer's norm), or None
    for one that reads such a linear's activated output (`fp8_one_scale_after`: kind -> the kind
    of linear before it in the layer), which comes at one scale."""
    if not plan.one_scale_up_projections:
        return {}
    inputs = getattr(model, "fp8_one_scale_inputs", {})
    after = getattr(model, "fp8_one_scale_after", {})
    chosen: dict[str, nn.Module | None] = {}
    for name in names:
        layer, kind = name.rsplit(".", 1)
        if kind in inputs:
            chosen[name] = model.get_submodule(f"{layer}.{inputs[kind]}")
    for name in names:
        layer, kind = name.rsplit(".", 1)
        if kind in after and f"{layer}.{after[kind]}" in chosen:
            chosen[name] = None
    return chosen


def quantize_model(model: nn.Module, plan: Fp8Plan = Fp8Plan(), pooling: str | None = None,
                   embed: Callable[[list[str]], object] | None = None) -> str:
    """Replace the linear layers the plan names by Fp8Linear, in place, after the model's last
    move to its device and dtype; returns a line for the log that says what runs FP8. `pooling`
    is the sentence head's mode (bf16_pooled_tokens applies to one-token modes). `embed` runs
    the still unquantized model on texts, for GPTQ's calibration; without it (or with the plan's
    weight_rounding "nearest") each weight is rounded to nearest."""
    names = fp8_linear_names(model, plan)
    pooled = pooled_tokens_for(model, plan, pooling) if names else None
    one_scale = one_scale_linears(model, plan, names)
    model.fp8_pooled_tokens = None  # calibration runs the model as it was
    gptq = plan.weight_rounding == "gptq" and embed is not None and bool(names)
    started = time.perf_counter()
    rounded = gptq_weights(model, names, embed, calibration_texts(), one_scale=frozenset(one_scale)) if gptq else None
    for name in names:
        linear = model.get_submodule(name)
        rows = rounded.rows[name] if rounded is not None else None
        replace_submodule(model, name, Fp8Linear(linear, plan.fast_accumulation, None if name in one_scale else pooled,
                                                 rows, one_scale.get(name), one_scale=name in one_scale,
                                                 workspace_free=plan.workspace_free_gemms))
    model.fp8_pooled_tokens = pooled
    total = sum(isinstance(m, (nn.Linear, Fp8Linear)) for m in model.layers.modules())
    if not names:
        return (f"FP8: no linear layer runs FP8 (hidden size below {plan.min_hidden_size}, where FP8 does not pay, "
                "or no layer past the bf16 first and last layers); the model runs bf16")
    kinds = sorted({name.rsplit(".", 1)[-1] for name in names})
    accumulation = "fast" if plan.fast_accumulation else "float32-promoted"
    kept = "".join(f", {kind} everywhere" for kind in plan.bf16_linears)
    if pooled is not None:
        kept += f", each FP8 linear's rows of the pooled ({pooling}) tokens"
    elif plan.bf16_pooled_tokens:  # asked for, not merely the width's default
        kept += (f"; the pooled tokens' rows run FP8 too: keeping them bf16 needs one-token pooling (this model's: "
                 f"{pooling}) in a model whose producers support it ({type(model).__name__})")
    rounding = (f"weights rounded by GPTQ on {len(calibration_texts())} built-in texts in "
                f"{time.perf_counter() - started:.1f} s ({rounded.timing()})" if rounded is not None
                else "weights rounded to nearest")
    scales = "per-token activation and per-channel weight scales"
    if one_scale:
        one_scale_kinds = sorted({name.rsplit(".", 1)[-1] for name in one_scale})
        scales += f" ({', '.join(one_scale_kinds)}: one scale per operand, bounded at load)"
    first, attention_first = bf16_first_layer_counts(model, plan)
    attention = f", the attention of the first {attention_first}" if attention_first > first else ""
    return (f"FP8: {len(names)} of {total} linear layers run as e4m3 GEMMs ({', '.join(kinds)}; {scales}, "
            f"{rounding}, {accumulation} accumulation); the others stay bf16 (the "
            f"first {first} and last {plan.bf16_last_layers} layer(s){attention}, "
            f"o_proj below hidden size {plan.attention_output_min_hidden_size}{kept})")
