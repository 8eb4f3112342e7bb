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
    # --data-parallel / --devices / --engine-process: one engine process per device (empty: one
    # engine, in this process).
    engine_devices: tuple[str, ...] = ()
    # --frontend-workers K: K front-end processes share the port and the engines (server/frontend_workers.py);
    # `worker_index` is set in each of them (None: a single-process server).
    frontend_workers: int = 1
    worker_index: int | None = None
    # Batches each front end keeps on each engine (--max-batches-in-flight); None: 2 on a GPU
    # with one front end (one computing, one ready behind it), else 1. A CPU computes one
    # batch at a time, and several front ends' batches queue on the shared engine anyway:
    # there a second batch in flight is only cut early, from a shorter queue, and smaller
    # batches run less efficiently.
    max_batches_in_flight: int | None = None
    log_level: str = "info"
    # Wire contract (issue 5): OpenAI's per-request token cap, truncation, aliases, keys.
    max_request_tokens: int = 300_000
    truncate: bool = True  # False: over-long inputs get OpenAI's context-length 400
    model_aliases: tuple[str, ...] = ()  # `--model-alias` values, ALIAS or ALIAS=MODEL (server/aliases.py)
    api_keys: tuple[str, ...] = ()  # empty: no authentication
    # Token-id input: "cl100k" reads it as tiktoken cl100k_base ids (OpenAI's, LangChain's) and
    # re-tokenizes the decoded text; "model" takes the served model's own ids as they are.
    token_ids: str = "cl100k"
    # Hardening (server/hardening_cli.py documents each; docs/reliability.md says why).
    max_body_bytes: int = 32 * 1024 * 1024
    max_input_chars: int = 200_000  # checked before tokenizing: the tokenizer reads all of a string
    request_timeout: float | None = 120.0  # seconds from the parsed body to the response; None: none
    engine_stall_timeout: float = 120.0  # a batch running longer marks the engine stuck
    shutdown_timeout: float = 30.0  # SIGTERM: seconds to finish in-flight requests
    log_format: str = "text"  # "text" | "json"
    log_inputs: bool = False  # put input texts in the request log (off: they may be private)
    cors_origins: tuple[str, ...] = ()  # empty: no CORS headers at all
    engine_plugin: str | None = None  # "module:function" wrapping the engine (fault injection in tests)

    @property
    def devices(self) -> tuple[str, ...]:
        """The engines' devices: one per engine process, else the in-process engine's ("auto" resolved)."""
        from engine.data_parallel import resolve_device  # imports torch, which the CLI's flag checks do without

        return self.engine_devices or (resolve_device(self.engine.device),)

    @property
    def batches_in_flight(self) -> int:
        if self.max_batches_in_flight is not None:
            return self.max_batches_in_flight
        on_gpu = all(d.startswith("cuda") for d in self.devices)
        return 2 if on_gpu and self.frontend_workers == 1 else 1
