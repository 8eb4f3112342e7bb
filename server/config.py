"""Server configuration: frozen, built once by the CLI (or a test) and passed down."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.config import EngineConfig


@dataclass(frozen=True)
class ServerConfig:
    engine: EngineConfig = field(default_factory=EngineConfig)
    host: str = "127.0.0.1"
    port: int = 8000
    served_model_name: str | None = None  # None: the model's own name
    max_request_inputs: int = 2048
    max_queued_tokens: int | None = None  # None: unbounded queue
    tokenizer_workers: int = 2
    log_level: str = "info"
    # Wire contract (issue 5): OpenAI's per-request token cap, truncation, aliases, keys.
    max_request_tokens: int = 300_000
    truncate: bool = True  # False: over-long inputs get OpenAI's context-length 400
    model_aliases: tuple[str, ...] = ()  # `--model-alias` values, ALIAS or ALIAS=MODEL (server/aliases.py)
    api_keys: tuple[str, ...] = ()  # empty: no authentication
    tiktoken_ids: bool = False  # read token-id input as tiktoken cl100k_base ids
