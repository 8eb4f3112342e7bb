"""pplx-embed-v1's config class stand-in: Qwen3's, under model_type bidirectional_pplx_qwen3."""

from transformers import Qwen3Config


class PPLXQwen3Config(Qwen3Config):
    model_type = "bidirectional_pplx_qwen3"
