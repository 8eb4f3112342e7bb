"""The vision tower's pre-norm block on the CPU, its linears oneDNN's fused ones: the bias, the activation
and the residual add computed in each matmul's epilogue, on the float32 accumulator, instead of a pass of
their own over the activations each.

Between a ViT's matmuls the CPU spent about as long as in them: the MLP's activation (three passes for
quick_gelu), two residual adds and the biases, each reading and writing a [tokens, 3072] tensor once more
than the matmul does. oneDNN's linear takes the activation and the add as post-ops. quick_gelu, x *
sigmoid(1.702 x), is silu(1.702 x) / 1.702: fc1's weights and bias are scaled by 1.702 and fc2's weights by
1 / 1.702 once, in float32 before they are cast to the model's dtype, so that its epilogue is oneDNN's swish.
The vectors equal transformers' within 1e-4 in float32 (tests/models/test_clip_models.py), as the plain
block's do; in bf16 each epilogue rounds once instead of after every step.
"""

from __future__ import annotations

import torch
from torch import nn

from rose_embed.engine.rose.layers.vit_block import Attend, PreNormBlock

QUICK_GELU_SCALE = 1.702
# vit_block.ACTIVATIONS' name -> (oneDNN post-op, its algorithm, the scale fc1 takes and fc2 gives back)
_POST_OPS = {
    "quick_gelu": ("swish", None, QUICK_GELU_SCALE),
    "gelu": ("gelu", "none", 1.0),
    "gelu_new": ("gelu", "tanh", 1.0),
    "gelu_pytorch_tanh": ("gelu", "tanh", 1.0),
    "relu": ("relu", None, 1.0),
}
_DTYPES = (torch.float32, torch.bfloat16)


def _has_fused_linears() -> bool:
    """Whether this torch has oneDNN, its fused linear and its weight packing."""
    return (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
            and hasattr(torch.ops.mkldnn, "_reorder_linear_weight"))


class CpuFusedBlock(nn.Module):
    """PreNormBlock's forward on images [N, L, width] with fused linears; shares the block's norms. The
    weights are packed once into oneDNN's blocked layout, which each matmul would otherwise reorder them to."""

    def __init__(self, block: PreNormBlock):
        super().__init__()
        post_op, self.algorithm, scale = _POST_OPS[block.act_name]
        self.post_op = post_op
        self.num_heads, self.head_dim = block.num_heads, block.head_dim
        self.layer_norm1, self.layer_norm2 = block.layer_norm1, block.layer_norm2
        dtype = block.fc1.weight.dtype

        def scaled(tensor: torch.Tensor, factor: float) -> torch.Tensor:
            return (tensor.float() * factor).to(dtype)

        with torch.no_grad():
            for name, weight, bias in (("qkv", block.qkv_proj.weight, block.qkv_proj.bias),
                                       ("out", block.out_proj.weight, block.out_proj.bias),
                                       ("fc1", scaled(block.fc1.weight, scale), scaled(block.fc1.bias, scale)),
                                       ("fc2", scaled(block.fc2.weight, 1 / scale), block.fc2.bias)):
                self.register_buffer(f"{name}_weight", torch.ops.mkldnn._reorder_linear_weight(weight, None))
                self.register_buffer(f"{name}_bias", bias.detach().clone())

    def forward(self, x: torch.Tensor, attend: Attend) -> torch.Tensor:
        linear = torch.ops.mkldnn._linear_pointwise
        num, length, width = x.shape
        qkv = linear(self.layer_norm1(x), self.qkv_weight, self.qkv_bias, "none", [], "")
        # q, k, v each contiguous as [N, heads, L, head_dim], the layout the CPU's SDPA kernel reads fastest,
        # handed over as the [N, L, heads, head_dim] views `attend` takes.
        q, k, v = (t.transpose(1, 2) for t in qkv.view(num, length, 3, self.num_heads, self.head_dim)
                   .permute(2, 0, 3, 1, 4).contiguous().unbind(0))
        x = linear.binary(attend(q, k, v).reshape(num, length, width), x, self.out_weight, self.out_bias, "add")
        hidden = linear(self.layer_norm2(x), self.fc1_weight, self.fc1_bias, self.post_op, [], self.algorithm)
        return linear.binary(hidden, x, self.fc2_weight, self.fc2_bias, "add")


def fuse_for_cpu(layers: nn.ModuleList) -> nn.ModuleList:
    """`layers` (PreNormBlocks on the CPU) as CpuFusedBlocks; `layers` itself where this torch lacks oneDNN's
    fused linear, the dtype is neither float32 nor bf16, or a layer is another block or of an activation
    without a post-op here."""
    fusable = all(type(layer) is PreNormBlock and layer.act_name in _POST_OPS  # not a subclass: its forward is its own
                  and layer.fc1.weight.device.type == "cpu" and layer.fc1.weight.dtype in _DTYPES for layer in layers)
    if not fusable or not _has_fused_linears():
        return layers
    return nn.ModuleList(CpuFusedBlock(layer) for layer in layers)
