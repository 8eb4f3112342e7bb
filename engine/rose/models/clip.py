"""CLIP (engine/model_files/clip.py): a causal text tower on the packed stream and a ViT over images.

`forward` is the text tower, as the runner calls every model: token states [T, projection_dim], each
token's final layer norm through text_projection, so that the head's last-token pooling reads a text's
vector (its ids end at the token transformers pools, engine/text/tokenizer.py). The projection of every
token costs about one linear of one layer, and keeps the head the one every embedder has.

`embed_images` is the vision tower: every image of a model has the same sequence (its patches and the
class token), so its attention is one dense call over [N, heads, L, head_dim], with no ragged backend.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rose_embed.engine.model_files.clip import clip_refusal
from rose_embed.engine.rose.attention.ragged import AttentionBackend, AttentionShape
from rose_embed.engine.rose.layers.vit_block import PreNormBlock, block_tensors
from rose_embed.engine.rose.models.weights import load_exactly


def _blocks(tower: dict) -> nn.ModuleList:
    hidden = tower["hidden_size"]
    return nn.ModuleList(
        PreNormBlock(hidden, tower["intermediate_size"], tower["num_attention_heads"], tower.get("layer_norm_eps", 1e-5),
                     tower.get("hidden_act", "quick_gelu"))
        for _ in range(tower["num_hidden_layers"])
    )


def _dense_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Bidirectional attention of equal-length sequences: q, k, v [N, L, heads, D] -> [N, L, heads, D]."""
    return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2)


class ClipModel(nn.Module):
    def __init__(self, config: dict):
        super().__init__()
        if refusal := clip_refusal(config):
            raise ValueError(refusal)
        text, vision = config["text_config"], config["vision_config"]
        text = {"hidden_size": 512, "intermediate_size": 2048, "num_hidden_layers": 12, "num_attention_heads": 8,
                "vocab_size": 49408, "max_position_embeddings": 77, **text}
        vision = {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12, "num_attention_heads": 12,
                  "image_size": 224, "patch_size": 32, **vision}
        projection_dim = config.get("projection_dim", 512)
        self.text_heads = text["num_attention_heads"]
        self.token_embedding = nn.Embedding(text["vocab_size"], text["hidden_size"])
        self.position_embedding = nn.Embedding(text["max_position_embeddings"], text["hidden_size"])
        self.layers = _blocks(text)
        self.final_layer_norm = nn.LayerNorm(text["hidden_size"], eps=text.get("layer_norm_eps", 1e-5))
        self.text_projection = nn.Linear(text["hidden_size"], projection_dim, bias=False)

        width, patch = vision["hidden_size"], vision["patch_size"]
        eps = vision.get("layer_norm_eps", 1e-5)
        num_positions = (vision["image_size"] // patch) ** 2 + 1
        self.image_size = vision["image_size"]
        self.patch_embedding = nn.Conv2d(3, width, kernel_size=patch, stride=patch, bias=False)
        self.class_embedding = nn.Parameter(torch.zeros(width))
        self.vision_position_embedding = nn.Embedding(num_positions, width)
        self.pre_layrnorm = nn.LayerNorm(width, eps=eps)
        self.vision_layers = _blocks(vision)
        self.post_layernorm = nn.LayerNorm(width, eps=eps)
        self.visual_projection = nn.Linear(width, projection_dim, bias=False)

    def attention_shape(self, is_causal: bool) -> AttentionShape:
        """The text tower's attention, the one the runner's backend computes (always causal)."""
        hidden = self.token_embedding.embedding_dim
        return AttentionShape(self.text_heads, self.text_heads, hidden // self.text_heads, True)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attention: AttentionBackend,
                meta: object) -> torch.Tensor:
        """The text tower on a packed stream -> [T, projection_dim]."""
        x = self.token_embedding(input_ids) + self.position_embedding(positions)

        def attend(q, k, v):
            return attention.forward(q, k, v, meta)

        for layer in self.layers:
            x = layer(x, attend)
        return self.text_projection(self.final_layer_norm(x))

    def embed_images(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """The vision tower: pixel_values [N, 3, S, S] (engine/image/preprocess.py's) -> [N, projection_dim]."""
        if pixel_values.shape[-2:] != (self.image_size, self.image_size):
            raise ValueError(f"images must be {self.image_size}x{self.image_size} pixels; got "
                             f"{pixel_values.shape[-2]}x{pixel_values.shape[-1]}")
        weight = self.patch_embedding.weight
        patches = self.patch_embedding(pixel_values.to(weight.dtype)).flatten(2).transpose(1, 2)  # [N, P, width]
        cls = self.class_embedding.expand(patches.shape[0], 1, -1)
        x = self.pre_layrnorm(torch.cat([cls, patches], dim=1) + self.vision_position_embedding.weight)
        for layer in self.vision_layers:
            x = layer(x, _dense_attention)
        return self.visual_projection(self.post_layernorm(x[:, 0]))

    def load_hf_weights(self, state: dict[str, torch.Tensor]) -> None:
        """Load a transformers CLIPModel state dict (q, k, v fused); a tensor left over is refused."""
        state = {name: tensor for name, tensor in state.items() if not name.endswith("position_ids")}
        state.pop("logit_scale", None)  # zero-shot's temperature: no vector depends on it
        ours = {
            "token_embedding.weight": state.pop("text_model.embeddings.token_embedding.weight"),
            "position_embedding.weight": state.pop("text_model.embeddings.position_embedding.weight"),
            "final_layer_norm.weight": state.pop("text_model.final_layer_norm.weight"),
            "final_layer_norm.bias": state.pop("text_model.final_layer_norm.bias"),
            "text_projection.weight": state.pop("text_projection.weight"),
            "patch_embedding.weight": state.pop("vision_model.embeddings.patch_embedding.weight"),
            "class_embedding": state.pop("vision_model.embeddings.class_embedding"),
            "vision_position_embedding.weight": state.pop("vision_model.embeddings.position_embedding.weight"),
            "visual_projection.weight": state.pop("visual_projection.weight"),
        }
        for norm in ("pre_layrnorm", "post_layernorm"):
            for kind in ("weight", "bias"):
                ours[f"{norm}.{kind}"] = state.pop(f"vision_model.{norm}.{kind}")
        for i in range(len(self.layers)):
            ours.update(block_tensors(state, f"text_model.encoder.layers.{i}.", f"layers.{i}."))
        for i in range(len(self.vision_layers)):
            ours.update(block_tensors(state, f"vision_model.encoder.layers.{i}.", f"vision_layers.{i}."))
        load_exactly(self, ours, state, "CLIP")
