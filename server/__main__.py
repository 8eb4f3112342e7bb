"""`rose-embed serve`: the command-line entry point."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from dataclasses import replace

from engine.config import POOLING_MODES, EngineConfig, ModelOverrides
from engine.data_parallel import check_devices, engine_process_wanted, resolve_device, resolve_engine_devices
from engine.loader import ModelLoadError, load_spec
from server.aliases import AliasError, resolve_aliases
from server.auth import API_KEY_ENV, keys_from_env
from server import embed_cli, hardening_cli
from server.config import ServerConfig


DEFAULT_MAX_BATCH_TOKENS = 16384


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Append "(default: ...)" only where the help text does not already say it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        return text if "default" in text else super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rose-embed", description="An OpenAI-compatible embeddings server.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve /v1/embeddings over HTTP",
                                formatter_class=_HelpFormatter)
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0 for all)")
    serve.add_argument("--port", type=int, default=8000, help="TCP port to listen on")
    serve.add_argument("--model", default=None,
                       help="local model directory or Hugging Face hub id (default: the embedded all-MiniLM-L6-v2)")
    serve.add_argument("--revision", default=None,
                       help="a hub id's branch, tag or commit hash (default: its default branch)")
    serve.add_argument("--served-model-name", default=None,
                       help="the name clients send as `model` and /v1/models lists (default: the model's name)")
    serve.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    serve.add_argument("--data-parallel", type=int, default=1, metavar="N",
                       help="N engine processes, one per device (cuda:0..N-1; N CPU engines with --device cpu), "
                            "fed by one batcher; 1: one engine (in the server process or its own: --engine-process)")
    serve.add_argument("--devices", default=None, metavar="LIST",
                       help="the engines' devices, comma-separated (e.g. cuda:0,cuda:1): one engine process each "
                            "(default: from --device and --data-parallel)")
    serve.add_argument("--engine-process", choices=["auto", "on", "off"], default="auto",
                       help="run the engine in a process of its own, fed through shared memory, instead of a thread "
                            "of the server process (auto: on for the CPU, where the engine's threads and the event "
                            "loop slow each other down; off for CUDA)")
    serve.add_argument("--frontend-workers", type=int, default=1, metavar="K",
                       help="K front-end processes (HTTP, tokenization, batcher, encoding) sharing the port "
                            "(SO_REUSEPORT) and feeding one engine process per device; 1: a single process")
    serve.add_argument("--max-batches-in-flight", type=int, default=None, metavar="N",
                       help="batches each front end keeps on each engine (default: 2 on a GPU with one front end, "
                            "one computing and one ready behind it; 1 on the CPU, which computes one at a time, and "
                            "with several front ends, whose batches queue on the shared engine)")
    serve.add_argument("--dtype", default="auto", help="auto (fp32 on CPU, bf16 on CUDA), float32, bfloat16, float16")
    serve.add_argument("--max-batch-tokens", type=int, default=None,
                       help=f"token budget of one batch (default: {DEFAULT_MAX_BATCH_TOKENS}, "
                            "or the model's max sequence length where that is longer)")
    serve.add_argument("--max-batch-seqs", type=int, default=512, help="most sequences in one batch")
    serve.add_argument("--max-seq-len", type=int, default=None,
                       help="truncate inputs to this many tokens (default: the model's limit)")
    serve.add_argument("--max-queued-tokens", type=int, default=None,
                       help="answer 429 when the queue holds more tokens than this (default: no limit)")
    serve.add_argument("--tokenizer-workers", type=int, default=2, help="threads that tokenize requests")
    serve.add_argument("--num-threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    serve.add_argument("--attention-backend", default="auto", choices=["auto", "varlen", "flashinfer", "sdpa"],
                       help="ragged attention kernels on CUDA (auto: torch's varlen_attn; flashinfer needs the gpu "
                            "extra and head_dim 64/128/256); the CPU always uses sdpa")
    serve.add_argument("--enforce-eager", action="store_true", help="CUDA: run every batch eagerly, no CUDA graphs")
    serve.add_argument("--no-fused-kernels", dest="fused_kernels", action="store_false",
                       help="CUDA: run the steps between the matmuls (norms, rotary, activations) as plain PyTorch "
                            "instead of the fused Triton kernels (comparison, or a machine without a C compiler)")
    serve.add_argument("--capture-at-start", action="store_true",
                       help="CUDA: capture every bucket's graph before serving instead of on the second batch")
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    # OpenAI's wire contract (issue 5).
    serve.add_argument("--max-request-tokens", type=int, default=300_000,
                       help="most tokens one request may embed, summed over its inputs (400 above)")
    serve.add_argument("--no-truncate", dest="truncate", action="store_false",
                       help="reject inputs longer than the model's limit with OpenAI's 400 (default: truncate them)")
    serve.add_argument("--model-alias", action="append", default=[], metavar="ALIAS[=MODEL]",
                       help="another name clients may send as `model`, e.g. text-embedding-3-small (repeatable)")
    serve.add_argument("--api-key", action="append", default=[], metavar="KEY",
                       help=f"require `Authorization: Bearer KEY` (repeatable; also ${API_KEY_ENV}, comma-separated)")
    serve.add_argument("--token-ids", choices=["cl100k", "model"], default="cl100k",
                       help="what token-id input means: cl100k: tiktoken cl100k_base ids (OpenAI's; LangChain's "
                            "OpenAIEmbeddings sends them for any model name), decoded and re-tokenized with the "
                            "model's tokenizer; model: the served model's own ids, used as they are")
    _add_model_flags(serve)
    hardening_cli.add_arguments(serve)
    embed_cli.add_parser(commands, _HelpFormatter)
    return parser


def _add_model_flags(serve: argparse.ArgumentParser) -> None:
    """Overrides of what the checkpoint says about itself (engine/flavour.py has the rules)."""
    group = serve.add_argument_group("model flavour (default: read from the checkpoint)")
    group.add_argument("--attention", choices=["causal", "bidirectional"], default=None,
                       help="attention mask (default: bidirectional for pplx-embed / use_bidirectional_attention, "
                            "causal for other decoders)")
    group.add_argument("--pooling", choices=POOLING_MODES, default=None,
                       help="pooling (default: the sentence-transformers Pooling module, else last for causal decoders, "
                            "mean)")
    group.add_argument("--embedding-quantization", choices=["none", "tanh"], default=None,
                       help="tanh: offer int8 = round(127*tanh(x)) and sign-bit formats (default: on for pplx-embed)")
    group.add_argument("--default-prompt-name", default=None,
                       help="prompt applied when a request names none ('' for none; default: the model's)")
    group.add_argument("--matryoshka-dims", default=None,
                       help="sizes allowed as `dimensions`: 'any', 'none' or e.g. '128,256,512' "
                            "(default: config.json matryoshka_dimensions, else any)")


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    if args.frontend_workers < 1:
        raise ValueError(f"--frontend-workers must be at least 1; got {args.frontend_workers}")
    if args.max_batches_in_flight is not None and args.max_batches_in_flight < 1:
        raise ValueError(f"--max-batches-in-flight must be at least 1; got {args.max_batches_in_flight}")
    devices = resolve_engine_devices(args.device, args.data_parallel, args.devices)
    own_process = len(devices) > 1 or engine_process_wanted(args.engine_process, devices[0])
    if args.engine_process == "off" and len(devices) > 1:
        raise ValueError("--engine-process off runs one engine in the server process; "
                         f"{len(devices)} engines need a process each")
    if own_process and len(devices) == 1:
        devices = (resolve_device(devices[0]),)
    engine = EngineConfig(
        model=args.model, revision=args.revision, device=devices[0] if len(devices) == 1 else args.device,
        dtype=args.dtype,
        max_batch_tokens=args.max_batch_tokens or DEFAULT_MAX_BATCH_TOKENS,
        max_batch_seqs=args.max_batch_seqs, max_seq_len=args.max_seq_len, num_threads=args.num_threads,
        attention_backend=args.attention_backend, enforce_eager=args.enforce_eager,
        fused_kernels=args.fused_kernels,
        capture_at_start=args.capture_at_start,
        model_overrides=ModelOverrides(
            attention=args.attention, pooling=args.pooling, quantization=args.embedding_quantization,
            default_prompt_name=args.default_prompt_name, matryoshka_dims=args.matryoshka_dims,
        ),
    )
    return ServerConfig(
        engine=engine, host=args.host, port=args.port, served_model_name=args.served_model_name,
        max_queued_tokens=args.max_queued_tokens, tokenizer_workers=args.tokenizer_workers,
        engine_devices=devices if own_process else (), frontend_workers=args.frontend_workers,
        max_batches_in_flight=args.max_batches_in_flight,
        log_level=args.log_level, max_request_tokens=args.max_request_tokens, truncate=args.truncate,
        model_aliases=tuple(args.model_alias), api_keys=tuple(dict.fromkeys([*args.api_key, *keys_from_env()])),
        token_ids=args.token_ids, **hardening_cli.config_kwargs(args),
    )


def serve(config: ServerConfig, budget_is_default: bool = False) -> None:
    import uvicorn

    from compat.tiktoken_ids import TiktokenUnavailableError
    from server.app import create_app
    from server.logs import configure_logging
    from server.middleware import ObservedApp

    try:
        spec = load_spec(config.engine.model, config.engine.max_seq_len, config.engine.model_overrides,  # fail fast
                         config.engine.revision)
        check_devices(config.engine_devices)
    except (ModelLoadError, ValueError) as exc:
        sys.exit(f"rose-embed: {exc}")
    if config.engine.max_batch_tokens < spec.max_seq_len and budget_is_default:
        # A 32k-context model must still fit one whole sequence into a batch.
        config = replace(config, engine=replace(config.engine, max_batch_tokens=spec.max_seq_len))
    if config.engine.max_batch_tokens < spec.max_seq_len:
        sys.exit(f"rose-embed: --max-batch-tokens must be at least the max sequence length ({spec.max_seq_len})")
    configure_logging(config.log_level, config.log_format)
    name = config.served_model_name or spec.name
    try:
        resolve_aliases(config.model_aliases, name)
    except AliasError as exc:
        sys.exit(f"rose-embed: {exc}")
    if config.max_request_tokens < 1:
        sys.exit("rose-embed: --max-request-tokens must be at least 1")
    print(f"rose-embed: serving {name} on http://{config.host}:{config.port}/v1 (GET /health turns 200 once ready)",
          flush=True)
    if config.frontend_workers > 1:
        from server.frontend_workers import serve_frontend_workers

        serve_frontend_workers(config, spec)
        return
    try:
        app = create_app(config)
    except TiktokenUnavailableError as exc:
        sys.exit(f"rose-embed: {exc}")
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
        try:
            config = config_from_args(args)
        except ValueError as exc:
            sys.exit(f"rose-embed: {exc}")
        serve(config, budget_is_default=args.max_batch_tokens is None)
    elif args.command == "embed":
        embed_cli.run(args)


if __name__ == "__main__":
    main()
