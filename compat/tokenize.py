"""msgspec Structs for POST /tokenize and /detokenize, in vLLM's shape.

/tokenize takes a `prompt` and answers its token ids (`tokens`), their `count` and the
served model's `max_model_len`; /detokenize takes `tokens` and answers the `prompt` they spell.
The texts are not truncated here: the count says how far past the limit a text would go.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from rose_embed.compat.openai import MODEL_FIELD_DESCRIPTION, documented


class TokenizeRequest(msgspec.Struct, kw_only=True):
    prompt: Annotated[str, documented("The text to tokenize.")]
    model: Annotated[str | None, documented(MODEL_FIELD_DESCRIPTION)] = None
    add_special_tokens: Annotated[bool, documented(
        "Add the special tokens the model's tokenizer puts around a text ([CLS] ... [SEP], say).")] = True
    return_token_strs: Annotated[bool, documented("Also answer each token as the vocabulary spells it.")] = False


class TokenizeResponse(msgspec.Struct, kw_only=True):
    count: int
    max_model_len: int
    tokens: list[int]
    token_strs: list[str] | None = None


class DetokenizeRequest(msgspec.Struct, kw_only=True):
    tokens: Annotated[list[int], documented("Token ids of the served model's vocabulary.")]
    model: Annotated[str | None, documented(MODEL_FIELD_DESCRIPTION)] = None


class DetokenizeResponse(msgspec.Struct, kw_only=True):
    prompt: str
