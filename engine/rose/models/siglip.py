"""SigLIP (engine/model_files/siglip.py): a bidirectional text tower on the packed stream and a ViT over
images with an attention-pooling head.

`forward` is the text tower, as the runner calls every model: token states [T, projection], each token's
final layer norm through `head`, so that the sentence head's last-token pooling reads a text's vector.
transformers reads it at the last position of a text padded to the position table's length: a text that
comes here unpadded (its pads masked out in the reference) has its positions shifted to end there.

`embed_images` is the vision tower: every image's sequence is its patches, so attention is one dense call.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rose_embed.engine.model_files.siglip import siglip_refusal, text_tower, vision_tower
from rose_embed.engine.rose.attention.ragged import AttentionBackend, AttentionShape
from rose_embed.engine.rose.layers.attention_pool import AttentionPoolingHead
from rose_embed.engine.rose.layers.vit_block import PreNormBlock, block_tensors
from rose_embed.engine.rose.models.weights import load_exactly


def _blocks(tower: dict) -> nn.ModuleList:
    return nn.ModuleList(
        PreNormBlock(tower["hidden_size"], tower["intermediate_size"], tower["num_attention_heads"],
                     tower["layer_norm_eps"], tower["hidden_act"])
        for _ in range(tower["num_hidden_layers"])
    )


def _dense_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Bidirectional attention of equal-length sequences: q, k, v [N, L, heads, D] -> [N, L, heads, D]."""
    return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2)


def end_aligned(positions: torch.Tensor, length: int) -> torch.Tensor:
    """Each segment's positions (0, 1, ... in the packed stream) shifted so that its last token sits at
    `length - 1`; a segment `length` tokens long keeps its own. Segments start where a position is 0."""
    segment = torch.cumsum(positions == 0, 0) - 1
    lengths = torch.zeros_like(positions).index_add_(0, segment, torch.ones_like(positions))
    return positions + (length - lengths[segment]).clamp(min=0)


class SiglipModel(nn.Module):
    def __init__(self, config: dict):
        super().__init__()
        if refusal := siglip_refusal(config):
            raise ValueError(refusal)
        text, vision = text_tower(config), vision_tower(config)
        hidden = text["hidden_size"]
        self.text_heads = text["num_attention_heads"]
        self.text_len = text["max_position_embeddings"]
        self.token_embedding = nn.Embedding(text["vocab_size"], hidden)
        self.position_embedding = nn.Embedding(self.text_len, hidden)
        self.layers = _blocks(text)
        self.final_layer_norm = nn.LayerNorm(hidden, eps=text["layer_norm_eps"])
        self.head = nn.Linear(hidden, text.get("projection_size") or hidden)

        width, patch = vision["hidden_size"], vision["patch_size"]
        self.image_size = vision["image_size"]
        self.patch_embedding = nn.Conv2d(3, width, kernel_size=patch, stride=patch)
        self.vision_position_embedding = nn.Embedding((self.image_size // patch) ** 2, width)
        self.vision_layers = _blocks(vision)
        self.post_layernorm = nn.LayerNorm(width, eps=vision["layer_norm_eps"])
        self.pooling_head = AttentionPoolingHead(width, vision["intermediate_size"], vision["num_attention_heads"],
                                                 vision["layer_norm_eps"], vision["hidden_act"])

    def attention_shape(self, is_causal: bool) -> AttentionShape:
        """The text tower's attention, the one the runner's backend computes (bidirectional)."""
        hidden = self.token_embedding.embedding_dim
        return AttentionShape(self.text_heads, self.text_heads, hidden // self.text_heads, False)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attention: AttentionBackend,
                meta: object) -> torch.Tensor:
        """The text tower on a packed stream -> [T, projection]."""
        x = self.token_embedding(input_ids) + self.position_embedding(end_aligned(positions, self.text_len))

        def attend(q, k, v):
            return attention.forward(q, k, v, meta)

        for layer in self.layers:
            x = layer(x, attend)
        return self.head(self.final_layer_norm(x))

    def embed_images(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """The vision tower: pixel_values [N, 3, S, S] (engine/image/preprocess.py's) -> [N, hidden]."""
        if pixel_values.shape[-2:] != (self.image_size, self.image_size):
            raise ValueError(f"images must be {self.image_size}x{self.image_size} pixels; got "
                             f"{pixel_values.shape[-2]}x{pixel_values.shape[-1]}")
        weight = self.patch_embedding.weight
        x = self.patch_embedding(pixel_values.to(weight.dtype)).flatten(2).transpose(1, 2)  # [N, P, width]
        x = x + self.vision_position_embedding.weight
        for layer in self.vision_layers:
            x = layer(x, _dense_attention)
        return self.pooling_head(self.post_layernorm(x))

    def load_hf_weights(self, state: dict[str, torch.Tensor]) -> None:
        """Load a transformers SiglipModel state dict (q, k, v fused); a tensor left over is refused."""
        state = {name: tensor for name, tensor in state.items() if not name.endswith("position_ids")}
        for name in ("logit_scale", "logit_bias"):  # zero-shot's sigmoid: no vector depends on them
            state.pop(name, None)
        ours = {
            "token_embedding.weight": state.pop("text_model.embeddings.token_embedding.weight"),
            "position_embedding.weight": state.pop("text_model.embeddings.position_embedding.weight"),
            "vision_position_embedding.weight": state.pop("vision_model.embeddings.position_embedding.weight"),
        }
        for ours_name, hf_name in (("final_layer_norm", "text_model.final_layer_norm"), ("head", "text_model.head"),
                                   ("patch_embedding", "vision_model.embeddings.patch_embedding"),
                                   ("post_layernorm", "vision_model.post_layernorm")):
            for kind in ("weight", "bias"):
                ours[f"{ours_name}.{kind}"] = state.pop(f"{hf_name}.{kind}")
        for i in range(len(self.layers)):
            ours.update(block_tensors(state, f"text_model.encoder.layers.{i}.", f"layers.{i}."))
        for i in range(len(self.vision_layers)):
            ours.update(block_tensors(state, f"vision_model.encoder.layers.{i}.", f"vision_layers.{i}."))
        ours.update(self.pooling_head.hf_tensors(state, "vision_model.head.", "pooling_head."))
        load_exactly(self, ours, state, "SigLIP")
