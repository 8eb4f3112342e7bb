"""Random-weight CLIP checkpoints of the published vision towers' shapes, for bench/images.py: a transformers
CLIPModel saved by save_pretrained beside its CLIPProcessor (CLIP's PIL image processor at the tower's size,
and the tests' CLIP tokenizer over a small byte-level vocabulary, built offline), so that the engine loads
each through the path a server takes. Only the vision tower is timed: the text tower is one small layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch


@dataclass(frozen=True)
class VisionShape:
    hidden: int
    layers: int
    heads: int
    patch: int
    image_size: int
    projection: int  # the vectors' width

    @property
    def tokens(self) -> int:
        """An image's sequence: its patches and the class token."""
        return (self.image_size // self.patch) ** 2 + 1


# OpenAI CLIP's vision towers (the MLP 4x wide), and a tiny one for a smoke run
SHAPES = {
    "b16": VisionShape(768, 12, 12, 16, 224, 512),  # ViT-B/16
    "l14": VisionShape(1024, 24, 16, 14, 224, 768),  # ViT-L/14
    "tiny": VisionShape(64, 2, 2, 16, 64, 32),
}
TEXT_LENGTH = 77  # CLIP's


def write_clip(out: Path, shape: VisionShape, seed: int = 0) -> Path:
    """A CLIPModel of `shape`'s vision tower (quick_gelu, as OpenAI's) and its processor, saved to `out`."""
    from transformers import CLIPConfig, CLIPImageProcessorPil, CLIPModel, CLIPProcessor

    from tests.support.clip_checkpoints import clip_tokenizer

    tokenizer = clip_tokenizer(TEXT_LENGTH)
    text = {"vocab_size": len(tokenizer), "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
            "num_attention_heads": 2, "max_position_embeddings": TEXT_LENGTH, "bos_token_id": tokenizer.bos_token_id,
            "pad_token_id": tokenizer.pad_token_id, "eos_token_id": tokenizer.eos_token_id}
    vision = {"hidden_size": shape.hidden, "intermediate_size": 4 * shape.hidden, "num_hidden_layers": shape.layers,
              "num_attention_heads": shape.heads, "patch_size": shape.patch, "image_size": shape.image_size,
              "hidden_act": "quick_gelu"}
    torch.manual_seed(seed)
    model = CLIPModel(CLIPConfig(text_config=text, vision_config=vision, projection_dim=shape.projection))
    model.save_pretrained(out)
    processor = CLIPImageProcessorPil(size={"shortest_edge": shape.image_size},
                                      crop_size={"height": shape.image_size, "width": shape.image_size})
    CLIPProcessor(image_processor=processor, tokenizer=tokenizer).save_pretrained(out)
    return out
