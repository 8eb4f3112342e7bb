"""The serve command's flags for limits, timeouts, faults, logs and CORS (docs/reliability.md)."""

from __future__ import annotations

import argparse

from rose_embed.server.cli.help import advanced
from rose_embed.server.cli.values import non_empty, positive_int, positive_seconds, seconds_or_zero, whole_number
from rose_embed.server.config import ServerConfig

_DEFAULTS = ServerConfig()


def add_arguments(serve: argparse.ArgumentParser, tuning: argparse._ArgumentGroup) -> None:
    """The flags on `serve`, the advanced ones in its `tuning` group, where --help-all lists them."""
    serve.add_argument("--max-body-bytes", type=positive_int, default=_DEFAULTS.max_body_bytes,
                       help="largest request body; larger ones get 413")
    advanced(tuning.add_argument("--max-input-chars", type=positive_int, default=_DEFAULTS.max_input_chars,
                                 help="longest text input in characters, checked before tokenizing; longer ones get 400"))
    serve.add_argument("--max-request-inputs", type=positive_int, default=_DEFAULTS.max_request_inputs,
                       help="most inputs in one request; more get 400")
    serve.add_argument("--request-timeout", type=seconds_or_zero, default=_DEFAULTS.request_timeout,
                       help="seconds from a request's arrival to its vectors; then 504 (0: no limit)")
    advanced(tuning.add_argument("--engine-stall-timeout", type=positive_seconds,
                                 default=_DEFAULTS.engine_stall_timeout,
                                 help="a batch running longer marks the engine stuck: /health and requests get 503"))
    advanced(tuning.add_argument("--engine-stall-floor", type=positive_seconds, default=_DEFAULTS.engine_stall_floor,
                                 help="an engine with work waiting that finishes no batch for 10x its longest batch "
                                      "(or 3x a full batch at its speed), and at least this long, is killed and "
                                      "restarted"))
    advanced(tuning.add_argument("--engine-max-restarts", type=whole_number, default=_DEFAULTS.engine_max_restarts,
                                 help="engine processes that die are restarted up to this many times within "
                                      "--engine-restart-window; one more death stops the server with exit status 1 "
                                      "(0: the first does)"))
    advanced(tuning.add_argument("--engine-restart-window", type=positive_seconds,
                                 default=_DEFAULTS.engine_restart_window,
                                 help="seconds over which --engine-max-restarts counts an engine's restarts"))
    serve.add_argument("--shutdown-timeout", type=seconds_or_zero, default=_DEFAULTS.shutdown_timeout,
                       help="on SIGTERM, seconds to finish requests in flight before exiting")
    advanced(tuning.add_argument("--keep-alive-timeout", type=positive_seconds, default=_DEFAULTS.keep_alive_timeout,
                                 help="seconds an idle keep-alive connection stays open; longer than the clients' "
                                      "and proxies' idle timeouts, so that they close first"))
    advanced(tuning.add_argument("--max-header-bytes", type=positive_int, default=_DEFAULTS.max_header_bytes,
                                 help="largest request head (request line and headers); larger ones get 431"))
    advanced(tuning.add_argument("--header-timeout", type=positive_seconds, default=_DEFAULTS.header_timeout,
                                 help="seconds from a request's first byte to the end of its headers; then 408 and "
                                      "the connection closed"))
    advanced(tuning.add_argument("--max-connections", type=positive_int, default=_DEFAULTS.max_connections,
                                 help="connections one front end holds; past them a new one gets 503 with "
                                      "Retry-After and is closed"))
    advanced(tuning.add_argument("--allow-private-image-urls", action="store_true",
                                 help="fetch image URLs on private, loopback and link-local addresses too (off: only "
                                      "public addresses, so that a request cannot reach the server's own network)"))
    advanced(tuning.add_argument("--image-url-timeout", type=positive_seconds, default=_DEFAULTS.image_url_timeout,
                                 help="seconds to fetch an image URL (redirects and body included); then 400"))
    serve.add_argument("--log-format", choices=["text", "json"], default=_DEFAULTS.log_format,
                       help="log lines as text or one JSON object each")
    advanced(tuning.add_argument("--log-inputs", action="store_true",
                                 help="put the input texts in the per-request log line (off: they may be private)"))
    serve.add_argument("--cors-origin", type=non_empty, action="append", default=[], metavar="ORIGIN",
                       help="allow browser calls from this origin (repeatable; '*' for any); default: no CORS")
    advanced(tuning.add_argument("--protect-metrics-and-docs", action="store_true",
                                 help="with --api-key: /metrics and /docs need the key too (/health stays open)"))
    serve.add_argument("--engine-plugin", default=None, help=argparse.SUPPRESS)  # fault injection in tests
    # What the HTTP guard costs, measured against uvicorn's own protocol (bench/gpu_session.sh http-guard).
    serve.add_argument("--http-protocol", choices=["guarded", "plain"], default="guarded", help=argparse.SUPPRESS)


def config_kwargs(args: argparse.Namespace) -> dict:
    """The ServerConfig fields these flags set."""
    return dict(
        max_body_bytes=args.max_body_bytes, max_input_chars=args.max_input_chars,
        max_request_inputs=args.max_request_inputs,
        request_timeout=args.request_timeout or None, engine_stall_timeout=args.engine_stall_timeout,
        engine_stall_floor=args.engine_stall_floor, engine_max_restarts=args.engine_max_restarts,
        engine_restart_window=args.engine_restart_window,
        shutdown_timeout=args.shutdown_timeout, keep_alive_timeout=args.keep_alive_timeout,
        max_header_bytes=args.max_header_bytes, header_timeout=args.header_timeout,
        max_connections=args.max_connections, allow_private_image_urls=args.allow_private_image_urls,
        image_url_timeout=args.image_url_timeout, protect_metrics_and_docs=args.protect_metrics_and_docs,
        log_format=args.log_format, log_inputs=args.log_inputs,
        cors_origins=tuple(args.cors_origin), engine_plugin=args.engine_plugin, http_protocol=args.http_protocol,
    )
