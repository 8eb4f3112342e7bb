"""The token side of OpenAI's wire contract: token-id input, context length, the request cap.

- `--token-ids cl100k` (the default): token-id input is read as tiktoken cl100k_base ids,
  what OpenAI's endpoint takes and LangChain's `OpenAIEmbeddings` sends for any model name,
  and turned back into text, so that it is tokenized by the served model like any string.
  `--token-ids model`: the ids are the served model's own and go to the engine as they are.
- Context length: inputs longer than the model's limit are truncated (the default, as
  sentence-transformers does) or, with `--no-truncate`, rejected with OpenAI's message.
- `--max-request-tokens`: the sum of the tokens a request embeds, OpenAI's 300,000 by default.
"""

from __future__ import annotations

import asyncio
import threading

import numpy as np
from tokenizers import Tokenizer

from compat.inputs import NormalisedInput, check_token_range
from compat.tiktoken_ids import TiktokenDecoder
from engine.tokenizer import ensure_end_token
from server.config import ServerConfig
from server.errors import APIError, invalid_request

MODEL_IDS_HINT = (
    "This server reads token ids as the served model's own (--token-ids model). If these are tiktoken "
    "cl100k_base ids (LangChain's OpenAIEmbeddings sends those by default), start it with --token-ids cl100k "
    "(the default), or pass check_embedding_ctx_length=False to OpenAIEmbeddings so that it sends text."
)


def context_length_error(max_len: int, num_tokens: int) -> APIError:
    # OpenAI's wording for an over-long embeddings input, with param and code null as OpenAI sends them.
    return APIError(
        400,
        f"This model's maximum context length is {max_len} tokens, however you requested {num_tokens} tokens "
        f"({num_tokens} in your prompt; 0 for the completion). Please reduce your prompt; or completion length.",
        "invalid_request_error", None, None,
    )


def request_tokens_error(num_tokens: int, max_tokens: int) -> APIError:
    return APIError(
        400, f"Requested {num_tokens} tokens, max {max_tokens} tokens per request",
        "max_tokens_per_request", None, "max_tokens_per_request",
    )


class TokenInputs:
    """Built once per app; the cl100k decoder loads at start-up so that a missing file fails early."""

    def __init__(self, config: ServerConfig):
        self.config = config
        self.decoder = TiktokenDecoder() if config.token_ids == "cl100k" else None
        self._counter: Tokenizer | None = None
        self._counter_lock = threading.Lock()

    async def decode_token_ids(self, inputs: NormalisedInput) -> NormalisedInput:
        """cl100k_base ids -> texts (--token-ids cl100k); texts, and the model's own ids, pass through."""
        if self.decoder is None or inputs.token_ids is None:
            return inputs
        for i, ids in enumerate(inputs.token_ids):
            bad = self.decoder.first_invalid_id(ids)
            if bad is not None:
                raise invalid_request(
                    f"'input[{i}]' holds token id {bad}, which is no token of tiktoken cl100k_base "
                    f"(ids 0..{self.decoder.vocab_size - 1}). This server reads token ids as cl100k_base ids "
                    "(--token-ids cl100k, the default); to send the served model's own ids, start it with "
                    "--token-ids model",
                    "input",
                )
        # Off the event loop: up to 2048 inputs of thousands of ids each.
        return NormalisedInput(texts=await asyncio.to_thread(self.decoder.decode, inputs.token_ids))

    def check_token_ids(self, token_ids: list[list[int]], vocab_size: int, max_seq_len: int) -> None:
        """The model's own ids (--token-ids model) must index its vocabulary; say what to do when they
        look like tiktoken's."""
        try:
            check_token_range(token_ids, vocab_size)
        except ValueError as exc:
            raise invalid_request(f"{exc}. {MODEL_IDS_HINT}", "input") from exc
        if not self.config.truncate:
            longest = max(len(ids) for ids in token_ids)
            if longest > max_seq_len:
                raise context_length_error(max_seq_len, longest)

    async def check_context_length(self, engine, texts: list[str], seqs: list[np.ndarray]) -> None:
        """With --no-truncate, reject a text whose full tokenization exceeds the model's limit.

        The engine's tokenizer truncates, so only texts that came back at exactly the limit
        can be longer; those few are counted again without truncation, off the event loop.
        """
        if self.config.truncate:
            return
        max_len = engine.tokenizer.max_seq_len
        suspects = [t for t, s in zip(texts, seqs) if len(s) >= max_len]
        if not suspects:
            return
        counts = await asyncio.to_thread(self._count_untruncated, engine, suspects)
        if max(counts) > max_len:
            raise context_length_error(max_len, max(counts))

    def _count_untruncated(self, engine, texts: list[str]) -> list[int]:
        with self._counter_lock:
            if self._counter is None:
                counter = Tokenizer.from_file(str(engine.spec.path / "tokenizer.json"))
                counter.no_truncation()
                counter.no_padding()
                if engine.spec.append_end_token:  # the end token the engine's tokenizer appends
                    ensure_end_token(engine.spec.path, counter)
                self._counter = counter
        # Stripped (or not) as the engine's tokenizer does, so that both count the same tokens.
        if engine.tokenizer.strip_texts:
            texts = [t.strip() for t in texts]
        return [len(e.ids) for e in self._counter.encode_batch(texts, add_special_tokens=True)]

    def check_request_tokens(self, seqs: list[np.ndarray]) -> int:
        """The sum of tokens to embed must stay within --max-request-tokens; returns the sum."""
        num_tokens = sum(len(s) for s in seqs)
        if num_tokens > self.config.max_request_tokens:
            raise request_tokens_error(num_tokens, self.config.max_request_tokens)
        return num_tokens
