"""A stand-in for pplx-embed-v1's remote code: Qwen3 with bidirectional attention.

Written beside a tiny checkpoint's config.json (auto_map: modeling.PPLXQwen3Model), so that
sentence-transformers loads it with trust_remote_code and runs every token against every
token, the way pplx-embed's own code does.
"""

from transformers import Qwen3Model
from transformers.masking_utils import create_bidirectional_mask

from .configuration import PPLXQwen3Config


class PPLXQwen3Model(Qwen3Model):
    config_class = PPLXQwen3Config

    def __init__(self, config):
        super().__init__(config)
        for layer in self.layers:
            layer.self_attn.is_causal = False

    def forward(self, input_ids=None, attention_mask=None, inputs_embeds=None, **kwargs):
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        mask = create_bidirectional_mask(config=self.config, inputs_embeds=inputs_embeds, attention_mask=attention_mask)
        return super().forward(inputs_embeds=inputs_embeds, attention_mask={"full_attention": mask}, **kwargs)
