"""`rose-embed serve`: the command-line entry point."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from engine.config import EngineConfig
from engine.loader import ModelLoadError, load_spec
from server import hardening_cli
from server.config import ServerConfig


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rose-embed", description="An OpenAI-compatible embeddings server.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve /v1/embeddings over HTTP",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0 for all)")
    serve.add_argument("--port", type=int, default=8000, help="TCP port to listen on")
    serve.add_argument("--model", default=None,
                       help="local model directory or Hugging Face hub id (default: the embedded all-MiniLM-L6-v2)")
    serve.add_argument("--served-model-name", default=None,
                       help="the name clients send as `model` and /v1/models lists (default: the model's name)")
    serve.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    serve.add_argument("--dtype", default="auto", help="auto (fp32 on CPU, bf16 on CUDA), float32, bfloat16, float16")
    serve.add_argument("--max-batch-tokens", type=int, default=16384, help="token budget of one batch")
    serve.add_argument("--max-batch-seqs", type=int, default=512, help="most sequences in one batch")
    serve.add_argument("--max-seq-len", type=int, default=None,
                       help="truncate inputs to this many tokens (default: the model's limit)")
    serve.add_argument("--max-queued-tokens", type=int, default=None,
                       help="answer 429 when the queue holds more tokens than this (default: no limit)")
    serve.add_argument("--tokenizer-workers", type=int, default=2, help="threads that tokenize requests")
    serve.add_argument("--num-threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    hardening_cli.add_arguments(serve)
    return parser


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    engine = EngineConfig(
        model=args.model, device=args.device, dtype=args.dtype, max_batch_tokens=args.max_batch_tokens,
        max_batch_seqs=args.max_batch_seqs, max_seq_len=args.max_seq_len, num_threads=args.num_threads,
    )
    return ServerConfig(
        engine=engine, host=args.host, port=args.port, served_model_name=args.served_model_name,
        max_queued_tokens=args.max_queued_tokens, tokenizer_workers=args.tokenizer_workers,
        log_level=args.log_level, **hardening_cli.config_kwargs(args),
    )


def serve(config: ServerConfig) -> None:
    import uvicorn

    from server.app import create_app
    from server.logs import configure_logging
    from server.memory import pin_malloc_thresholds
    from server.middleware import ObservedApp

    try:
        spec = load_spec(config.engine.model, config.engine.max_seq_len)  # fail fast on a bad --model
    except ModelLoadError as exc:
        sys.exit(f"rose-embed: {exc}")
    if config.engine.max_batch_tokens < spec.max_seq_len:
        sys.exit(f"rose-embed: --max-batch-tokens must be at least the max sequence length ({spec.max_seq_len})")
    configure_logging(config.log_level, config.log_format)
    pin_malloc_thresholds()  # before the model's tensors are allocated
    name = config.served_model_name or spec.name
    print(f"rose-embed: serving {name} on http://{config.host}:{config.port}/v1 (GET /health turns 200 once ready)",
          flush=True)
    app = create_app(config)
    try:
        # After a graceful shutdown uvicorn re-raises SIGTERM, so the process ends with its status.
        uvicorn.run(
            ObservedApp(app, log_inputs=config.log_inputs), host=config.host, port=config.port, loop="uvloop",
            http="httptools", log_level=config.log_level, access_log=False, log_config=None,
            timeout_graceful_shutdown=config.shutdown_timeout,
        )
    finally:
        if app.state.runtime.engine_thread_busy:
            # Python joins worker threads at exit (Ctrl-C); a stuck engine thread would keep it alive.
            logging.getLogger("rose_embed.server").error("the engine thread is stuck; exiting without it")
            logging.shutdown()
            os._exit(1)


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        serve(config_from_args(args))


if __name__ == "__main__":
    main()
