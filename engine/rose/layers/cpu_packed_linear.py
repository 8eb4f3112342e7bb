"""bf16 linears on the CPU with their weights packed once into oneDNN's blocked layout.

torch's bf16 linear on the CPU hands each call to oneDNN with the weight as a plain [out, in] matrix,
which oneDNN reorders into its blocked layout on every call: for a query's few rows that reorder costs
as much as the product itself (a one-query forward reads each weight twice). Packed once at load, the
same oneDNN product gives the same bits in about half the time on a few rows, and a little less on a
full batch's thousands (docs/cpu-linears.md). The packed copy sits beside the
module's own weight, which stays for whatever reads it (quantization, the heads, tests): the linears'
weights take twice their memory on the CPU.

Only bf16: in float32, oneDNN's product is not MKL's, and the engine's float32 answers are the ones
compared with the references at 1e-4; bf16's products are the same bits either way. A GELU after the
product runs in its epilogue where the model asks for one (`gelu`), as BERT's up projection does: on the
float32 accumulator before the one rounding to bf16, as the GPU's cuBLASLt epilogue does
(engine/rose/layers/fused.py's linear_gelu), so those outputs move by at most a bf16 step, towards
their float32 values.
"""

from __future__ import annotations

import torch
from torch import nn


def can_pack() -> bool:
    """Whether this torch has oneDNN, its fused linear and its weight packing, and oneDNN runs bf16 on
    this CPU (a bf16 model elsewhere, asked for with --dtype, keeps torch's own linear)."""
    mkldnn = torch.ops.mkldnn
    return (torch.backends.mkldnn.is_available() and hasattr(mkldnn, "_linear_pointwise")
            and hasattr(mkldnn, "_reorder_linear_weight") and hasattr(mkldnn, "_is_mkldnn_bf16_supported")
            and mkldnn._is_mkldnn_bf16_supported())


class PackedLinear(nn.Linear):
    """An nn.Linear whose forward reads its packed weight (`packed_weight`); built by pack_linears."""

    packed_weight: torch.Tensor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed_weight, self.bias, "none", [], "")

    def gelu(self, x: torch.Tensor, approximate: str) -> torch.Tensor:
        """gelu(self(x)), the GELU ("none": erf, "tanh") in the product's epilogue."""
        return torch.ops.mkldnn._linear_pointwise(x, self.packed_weight, self.bias, "gelu", [], approximate)


def pack_linears(model: nn.Module) -> int:
    """Every bf16 nn.Linear of `model` on the CPU (exactly nn.Linear: a quantized or otherwise special
    linear keeps its own forward) becomes a PackedLinear, in place; returns how many did."""
    if not can_pack():
        return 0
    packed = 0
    for module in model.modules():
        weight = getattr(module, "weight", None)
        if type(module) is not nn.Linear or weight.dtype != torch.bfloat16 or weight.device.type != "cpu":
            continue
        with torch.no_grad():
            module.register_buffer("packed_weight", torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None),
                                   persistent=False)
        module.__class__ = PackedLinear
        packed += 1
    return packed
