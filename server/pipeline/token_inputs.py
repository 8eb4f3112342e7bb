"""The token side of OpenAI's wire contract: token-id input and the request cap.

- `--token-ids cl100k` (the default): token-id input is read as tiktoken cl100k_base ids,
  what OpenAI's endpoint takes and LangChain's `OpenAIEmbeddings` sends for any model name,
  and turned back into text, so that it is tokenized by the served model like any string.
  `--token-ids model`: the ids are the served model's own and go to the engine as they are.
- Context length: server/pipeline/long_inputs.py (`--long-inputs`).
- `--max-request-tokens`: the sum of the tokens a request embeds, OpenAI's 300,000 by default.
"""

from __future__ import annotations

import asyncio

import numpy as np

from rose_embed.compat.inputs import NormalisedInput, check_token_range
from rose_embed.compat.tiktoken_ids import TiktokenDecoder
from rose_embed.server.config import ServerConfig
from rose_embed.server.http.errors import APIError, invalid_request

# A cl100k_base id decodes to at least one byte, and a character is at most four: more ids than
# four per allowed character always decode past the limit.
BYTES_PER_CHAR = 4
MODEL_IDS_HINT = (
    "This server reads token ids as the served model's own (--token-ids model). If these are tiktoken "
    "cl100k_base ids (LangChain's OpenAIEmbeddings sends those by default), start it with --token-ids cl100k "
    "(the default), or pass check_embedding_ctx_length=False to OpenAIEmbeddings so that it sends text."
)


def request_tokens_error(num_tokens: int, max_tokens: int, is_whole: bool = True) -> APIError:
    """OpenAI's 400 for a request past --max-request-tokens. `is_whole`: `num_tokens` counts the whole
    request; else only its texts tokenized before the count passed the cap (the rest never are)."""
    requested = f"{num_tokens}" if is_whole else f"at least {num_tokens}"
    counted = "" if is_whole else " (counting stopped once past the cap)"
    return APIError(
        400, f"Requested {requested} tokens{counted}, max {max_tokens} tokens per request",
        "max_tokens_per_request", None, "max_tokens_per_request",
    )


class TokenInputs:
    """Built once per app; the cl100k decoder loads at start-up so that a missing file fails early."""

    def __init__(self, config: ServerConfig):
        self.config = config
        self.decoder = TiktokenDecoder() if config.token_ids == "cl100k" else None

    async def decode_token_ids(self, inputs: NormalisedInput) -> NormalisedInput:
        """cl100k_base ids -> texts (--token-ids cl100k); texts, and the model's own ids, pass through.
        An input of more ids than could decode within --max-input-chars is refused before any decoding."""
        if self.decoder is None or inputs.token_ids is None:
            return inputs
        most = BYTES_PER_CHAR * self.config.max_input_chars
        for i, ids in enumerate(inputs.token_ids):
            if len(ids) > most:
                raise invalid_request(
                    f"'input[{i}]' holds {len(ids)} token ids, more than {most} ({BYTES_PER_CHAR} per character of "
                    f"--max-input-chars {self.config.max_input_chars}): they would decode to more characters than "
                    "an input may hold; the model reads only its first tokens anyway: send fewer ids per input",
                    "input", "input_too_long")
        # Off the event loop, the check too: up to 2048 inputs of thousands of ids each.
        return NormalisedInput(texts=await asyncio.to_thread(self._check_and_decode, inputs.token_ids))

    def _check_and_decode(self, token_ids: list[list[int]]) -> list[str]:
        for i, ids in enumerate(token_ids):
            bad = self.decoder.first_invalid_id(ids)
            if bad is not None:
                raise invalid_request(
                    f"'input[{i}]' holds token id {bad}, which is no token of tiktoken cl100k_base "
                    f"(ids 0..{self.decoder.vocab_size - 1}). This server reads token ids as cl100k_base ids "
                    "(--token-ids cl100k, the default); to send the served model's own ids, start it with "
                    "--token-ids model",
                    "input",
                )
        return self.decoder.decode(token_ids)

    def check_token_ids(self, token_ids: list[list[int]], vocab_size: int) -> None:
        """The model's own ids (--token-ids model) must index its vocabulary; say what to do when they
        look like tiktoken's."""
        try:
            check_token_range(token_ids, vocab_size)
        except ValueError as exc:
            raise invalid_request(f"{exc}. {MODEL_IDS_HINT}", "input") from exc

    def check_request_tokens(self, seqs: list[np.ndarray]) -> int:
        """The sum of tokens to embed must stay within --max-request-tokens; returns the sum."""
        num_tokens = sum(len(s) for s in seqs)
        if num_tokens > self.config.max_request_tokens:
            raise request_tokens_error(num_tokens, self.config.max_request_tokens)
        return num_tokens
