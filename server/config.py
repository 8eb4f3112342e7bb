"""Server configuration: frozen, built once by the CLI (or a test) and passed down."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from rose_embed.engine.contract.config import EngineConfig, ModelOverrides

if TYPE_CHECKING:
    from rose_embed.engine.model_files.loader import ModelSpec


@dataclass(frozen=True)
class ExtraModel:
    """A model served beside the first (`--model` given again): a hub id or directory, and the
    name clients send for it (None: its own)."""

    model: str
    served_name: str | None = None


@dataclass(frozen=True)
class ServerConfig:
    engine: EngineConfig = field(default_factory=EngineConfig)
    host: str = "127.0.0.1"
    port: int = 8000
    served_model_name: str | None = None  # the first model's; None: the model's own name
    # The models after the first (`engine.model`), each with its own weights, graphs and batches on
    # every device, through each device's one queue. They share `engine`'s device, dtype and budget;
    # the model-flavour overrides and the revision are the first model's only.
    extra_models: tuple[ExtraModel, ...] = ()
    max_request_inputs: int = 2048
    max_rerank_documents: int = 1000  # documents of one rerank request (Cohere's own advice caps them there)
    # The queue's bound (server/links/admission.py): a number of tokens, or None for what the engines
    # compute in `max_queue_seconds` at their measured speed.
    max_queued_tokens: int | None = None
    max_queue_seconds: float = 30.0
    tokenizer_workers: int = 2
    # Processes shared by the front ends that tokenize large requests' parts and encode their
    # vectors (server/processes/part_processes.py; the CLI's default: server/processes/topology.py); 0: none. Where the
    # supervisor started them, `part_process_addresses` says where they listen; without it a
    # front end starts its own.
    part_processes: int = 0
    part_process_addresses: tuple[str, ...] = ()
    # The engines' devices, one engine process each (server/processes/topology.py resolves the default:
    # every visible GPU, else the CPU), and the front ends that feed them all: with one, it runs
    # in the supervisor's process (server/processes/supervisor.py); `worker_index` is each one's index.
    devices: tuple[str, ...] = ("cpu",)
    frontend_workers: int = 1
    worker_index: int = 0
    # The directory where the front ends report their figures to each other (server/metrics/stats_board.py);
    # None: one front end, answering for itself.
    stats_dir: str | None = None
    # The shared block where the front ends say what each has admitted (server/links/admission_board.py);
    # None: one front end, whose board is its own.
    admission_board: str | None = None
    log_level: str = "info"
    # Wire contract (issue 5): OpenAI's per-request token cap, long inputs, aliases, keys.
    max_request_tokens: int = 300_000
    # Inputs over the model's limit (engine/text/long_inputs.py): "truncate", "chunk" (embedded window
    # by window, the vectors combined) or "error" (OpenAI's context-length 400); a request may override.
    long_inputs: str = "truncate"
    model_aliases: tuple[str, ...] = ()  # `--model-alias` values, ALIAS or ALIAS=MODEL (server/pipeline/aliases.py)
    strict_model_names: bool = False  # True: OpenAI's and Cohere's model names are not answered unless aliased
    api_keys: tuple[str, ...] = ()  # empty: no authentication
    # Keys with a weight other than 1 (`--api-keys-file`): their requests' share of each batch.
    api_key_weights: tuple[tuple[str, float], ...] = ()
    # Token-id input: "cl100k" reads it as tiktoken cl100k_base ids (OpenAI's, LangChain's) and
    # re-tokenizes the decoded text; "model" takes the served model's own ids as they are.
    token_ids: str = "cl100k"
    # Hardening (server/cli/hardening.py documents each; docs/reliability.md says why).
    max_body_bytes: int = 32 * 1024 * 1024
    max_input_chars: int = 200_000  # checked before tokenizing: the tokenizer reads all of a string
    request_timeout: float | None = 120.0  # seconds from arrival (the body's too) to the response; None: none
    engine_stall_timeout: float = 120.0  # a batch running longer marks the engine stuck
    # An engine with work that finishes no batch for a bound derived from its batches, and at least
    # this long, is wedged: killed and restarted (server/links/stall_watch.py).
    engine_stall_floor: float = 30.0
    # Engine processes that die are restarted (server/processes/engine_keeper.py), this many times within the
    # window; one more death stops the server with exit status 1, for its orchestrator to restart it.
    engine_max_restarts: int = 5
    engine_restart_window: float = 600.0
    shutdown_timeout: float = 30.0  # SIGTERM: seconds to finish in-flight requests
    # Seconds an idle keep-alive connection stays open. A server that closes an idle connection
    # while a client reuses it loses that request (a reset, or closed without a response; a POST is
    # not retried), so the client must always close first: longer than clients' pool expiry (httpx
    # 5 s, aiohttp 15 s) and proxies' idle timeouts (AWS ALB 60 s, which asks its targets to hold
    # longer); 75 s is nginx's own default. An idle connection costs only a socket.
    keep_alive_timeout: float = 75.0
    # The request head (request line and headers), bounded in size and in the time from its first
    # byte, and the connections one front end holds (server/http/guarded_http.py). The defaults leave room
    # for the longest tokens and cookies real clients send and time for the slowest working link,
    # and stay far below what hurts the server (docs/reliability.md).
    max_header_bytes: int = 32 * 1024
    header_timeout: float = 10.0
    max_connections: int = 1024
    # The guard above (server/http/guarded_http.py), or uvicorn's plain httptools protocol where a
    # benchmark measures what the guard costs.
    http_protocol: str = "guarded"
    log_format: str = "text"  # "text" | "json"
    log_inputs: bool = False  # put input texts in the request log (off: they may be private)
    cors_origins: tuple[str, ...] = ()  # empty: no CORS headers at all
    # With api_keys: /metrics and /docs need a key too (server/http/auth.py); /health stays open for probes.
    protect_metrics_and_docs: bool = False
    # Image inputs given as http(s) URLs (server/pipeline/image_fetch.py): the seconds a fetch may take, and
    # whether private, loopback and link-local addresses may be fetched too (on, a request can make the
    # server reach what only its own network can: for trusted clients only).
    image_url_timeout: float = 10.0
    allow_private_image_urls: bool = False
    engine_plugin: str | None = None  # "module:function" wrapping the engine (fault injection in tests)


def model_configs(config: ServerConfig) -> list[EngineConfig]:
    """One engine configuration per served model, the first (default) model's first."""
    return [config.engine, *(replace(config.engine, model=extra.model, revision=None, model_overrides=ModelOverrides())
                             for extra in config.extra_models)]


def load_specs(config: ServerConfig) -> list[ModelSpec]:
    """Each served model's description (no weights), in order; ModelLoadError names one that cannot be served."""
    from rose_embed.engine.model_files.loader import load_spec

    return [load_spec(c.model, c.max_seq_len, c.model_overrides, c.revision) for c in model_configs(config)]
