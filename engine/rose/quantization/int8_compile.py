"""Compiling an int8 model for the CPU: torch.compile with max-autotune and inductor's freezing
(docs/cpu-int8.md; bench/results/cpu/README.md says how it was chosen).

With the weights frozen into the graph as constants, inductor lowers each int8 linear
(`onednn.qlinear_pointwise` on uint8 activations) to its C++ GEMM template on the CPU's VNNI or
AMX micro-kernel, runs the token scale, bias and cast in the template's epilogue, and fuses each
activation's quantization into the pass that produces it (the LayerNorm, the GELU). Only the
template is offered to max-autotune: the alternative, oneDNN's own kernel, measured slower, and
a choice made by timing both on a busy machine would vary from start to start.

The attention runs inside the graph as one opaque op per layer (its batch plan,
engine/rose/attention/cpu.py's Python lists, stays outside), so the whole model is one
graph. The token count varies from batch to batch and is marked dynamic: one graph serves every
count (the template takes a symbolic M; K and N stay fixed), compiled by the first batch, which
the engine's warm-up runs, so no request waits for a compile.
"""

from __future__ import annotations

import itertools
import warnings

import torch
import torch._dynamo
import torch._inductor.config as inductor_config
from torch import nn

# Inductor's settings while the int8 graphs compile, set only around their calls.
_INDUCTOR = {"freezing": True, "max_autotune_gemm_backends": "CPP"}
# Inductor's int8 lowering copies a tensor in a way torch itself warns about, once per linear: noise
# in the server's log, and nothing a user can act on.
warnings.filterwarnings("ignore", message="To copy construct from a tensor", module="torch._inductor.mkldnn_lowerings")


# The attention backend and its plan for the batch each compiled model is running, by the model's
# number: the attention op below reads them there, so that the graph holds one opaque call
# instead of the plan's Python lists (which would break it into a graph per layer part).
_RUNNING: dict[int, tuple[object, object]] = {}
_numbers = itertools.count()


@torch.library.custom_op("rose::int8_model_attention", mutates_args=())
def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, model_number: int, local: bool,
               position_bias: torch.Tensor | None) -> torch.Tensor:
    backend, meta = _RUNNING[model_number]
    return backend.forward(q, k, v, meta, local=local, position_bias=position_bias)


@_attention.register_fake
def _(q, k, v, model_number, local, position_bias):
    return torch.empty_like(q)  # every backend answers [T, heads, head_dim], as q


class _AttentionOp:
    """What the compiled model is given as its attention backend: one opaque op per layer."""

    def __init__(self, model_number: int):
        self.model_number = model_number

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: object, local: bool = False,
                position_bias: torch.Tensor | None = None) -> torch.Tensor:
        return _attention(q, k, v, self.model_number, local, position_bias)


class CompiledInt8Model(nn.Module):
    """An int8 model (its linears Int8Linear) and its compiled forward; called as the model is.
    `model` is still the module, so weights and layers read as before."""

    def __init__(self, model: nn.Module, attention: object):
        super().__init__()
        self.model = model
        self.layers = model.layers
        self._attention = attention
        self._number = next(_numbers)
        self._attention_op = _AttentionOp(self._number)
        self._compiled = torch.compile(model, mode="max-autotune", dynamic=None)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attention: object, meta: object) -> torch.Tensor:
        if attention is not self._attention:
            raise ValueError("a compiled int8 model runs with the attention backend it was compiled with")
        if input_ids.shape[0] < 2:
            # dynamo specializes a dimension of size 1: a one-token batch would compile a graph of its
            # own, for seconds, mid-traffic. It runs eagerly instead (the same int8 products, oneDNN's).
            return self.model(input_ids, positions, attention, meta)
        # The token count varies from batch to batch: one graph for every count (K and N stay fixed).
        torch._dynamo.maybe_mark_dynamic(input_ids, 0)
        torch._dynamo.maybe_mark_dynamic(positions, 0)
        _RUNNING[self._number] = (attention, meta)
        try:
            with inductor_config.patch(_INDUCTOR):
                return self._compiled(input_ids, positions, self._attention_op, None)
        finally:
            del _RUNNING[self._number]

    def attention_shape(self, is_causal: bool):
        return self.model.attention_shape(is_causal)
