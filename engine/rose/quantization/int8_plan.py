"""Which linear layers --quantization int8 turns to int8 (engine/rose/quantization/int8.py), and making
them so: every linear layer of the encoder's layers, with SmoothQuant on those whose input is a
norm's output (the query/key/value and the up or gate-up projections), where a few outlier
channels would otherwise set every token's scale. The attention's and the feed-forward's output
projections take inputs without such channels and are quantized as they are (bench/results/cpu/README.md
measures what each kind costs and what SmoothQuant gives back).
"""

from __future__ import annotations

from typing import Callable

from torch import nn

from rose_embed.engine.rose.quantization.int8_calibration import CALIBRATION_TEXTS, activation_maxima
from rose_embed.engine.rose.quantization.int8 import Int8Linear, smoothing_factors
from rose_embed.engine.rose.quantization.module_swap import replace_submodule

# The linear layers that read a norm's output, by the names the models give them.
SMOOTHED_LINEARS = ("qkv_proj", "up_proj", "gate_up_proj")
# SmoothQuant's migration strength: half of each channel's range moves into the weight.
SMOOTHQUANT_ALPHA = 0.5


def int8_linear_names(model: nn.Module) -> list[str]:
    """The names (as model.named_modules gives them) of the linear layers int8 replaces."""
    return [f"layers.{index}.{name}" for index, layer in enumerate(model.layers)
            for name, module in layer.named_modules() if isinstance(module, nn.Linear)]


def is_smoothed(name: str) -> bool:
    return name.rsplit(".", 1)[-1] in SMOOTHED_LINEARS


def quantize_model(model: nn.Module, embed: Callable[[list[str]], object]) -> str:
    """Replace the model's linear layers by Int8Linear, in place, after its last move to its dtype;
    `embed` runs the still unquantized model on texts, for SmoothQuant's calibration. Returns a
    line for the log that says what runs int8."""
    names = int8_linear_names(model)
    smoothed = [name for name in names if is_smoothed(name)]
    maxima = activation_maxima(model, smoothed, embed)
    for name in names:
        linear = model.get_submodule(name)
        factors = None
        if name in maxima:
            factors = smoothing_factors(maxima[name], linear.weight, SMOOTHQUANT_ALPHA)
        replace_submodule(model, name, Int8Linear(linear, factors))
    kinds = sorted({name.rsplit(".", 1)[-1] for name in names})
    smoothed_kinds = sorted({name.rsplit(".", 1)[-1] for name in smoothed})
    return (f"int8: {len(names)} linear layers run int8 ({', '.join(kinds)}; per-token uint8 activations, "
            f"per-channel int8 weights); SmoothQuant (alpha {SMOOTHQUANT_ALPHA}) on {len(maxima)} of them "
            f"({', '.join(smoothed_kinds) or 'none'}), calibrated on {len(CALIBRATION_TEXTS)} built-in texts")
