"""`rose-embed serve` and `rose-embed embed`: the command-line entry point.

Nothing heavy is imported before argparse has checked the flags, so that --help, --version
and a wrong flag value answer at once; torch, the model's description, the port and the
server come after, and a Ctrl-C while they load ends the command without a traceback.

After Ctrl-C the command ends as Ctrl-C ends a process, killed by SIGINT (130 in a shell), so
that a script running it stops too: it leaves the KeyboardInterrupt uncaught, its traceback
silenced, and Python ends so after its cleanup. (A caught one and `sys.exit(130)` ended so
only by chance: whenever the interrupt had come inside code run by `exec`, as the dataclasses
module runs for each class it makes while the server's modules are imported.)
"""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import sys
from dataclasses import replace
from importlib import metadata

from rose_embed.engine.contract.config import LONG_INPUT_MODES, POOLING_MODES, SCHEDULING_POLICIES, EngineConfig, ModelOverrides
from rose_embed.server.cli.api_keys import API_KEY_ENV, keys_from_env, keys_from_file
from rose_embed.server.cli import embed as embed_cli, hardening as hardening_cli
from rose_embed.server.cli.help import HelpAll, HelpFormatter, advanced, hidden_alias
from rose_embed.engine.rose.quantization.support import QUANTIZATIONS
from rose_embed.engine.model_files.checkpoint_kind import KINDS
from rose_embed.engine.model_files.sparse import MAX_UNCUT_DIMS
from rose_embed.server.cli.values import (DTYPES, FP8_BF16_LAYERS_HELP, FP8_POOLED_TOKENS, FP8_POOLED_TOKENS_HELP,
                               FP8_WEIGHT_ROUNDING_HELP, FP8_WEIGHT_ROUNDINGS, api_key, attention_refusal,
                               device_list, fp8_plan_of, from_environment, matryoshka_sizes, model_choice,
                               non_empty, port_number, positive_int, positive_seconds, quantization_refusal,
                               whole_number)
from rose_embed.server.config import ExtraModel, ServerConfig
from rose_embed.server.processes.listen import PORT_ENV, ListenError, address, bind_sockets, port_env_warning


DEFAULT_MAX_BATCH_TOKENS = 16384
DEFAULT_PORT = 8000


def version() -> str:
    try:
        return metadata.version("rose-embed")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rose-embed", description="An OpenAI-compatible embeddings server.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    # A short usage line: argparse prints it above every flag error, and the full one runs to 20 lines.
    serve = commands.add_parser("serve", help="serve /v1/embeddings over HTTP", formatter_class=HelpFormatter,
                                usage="%(prog)s [flags]")
    serve.add_argument("--help-all", action=HelpAll, help="show every flag, the advanced ones too, and exit")
    serve.add_argument("--host", type=non_empty, default="127.0.0.1", help="address to listen on (0.0.0.0 for all)")
    serve.add_argument("--port", type=port_number, default=from_environment(PORT_ENV, DEFAULT_PORT),
                       help=f"TCP port to listen on, 1-65535 (default: ${PORT_ENV} where set, else {DEFAULT_PORT})")
    serve.add_argument("--model", type=model_choice, action="append", default=None, metavar="[NAME=]MODEL",
                       help="local model directory or Hugging Face hub id, served as NAME if given; repeat it to serve "
                            "several models, the first the default (default: the embedded all-MiniLM-L6-v2)")
    serve.add_argument("--revision", default=None,
                       help="a hub id's branch, tag or commit hash (default: its default branch)")
    serve.add_argument("--served-model-name", type=non_empty, default=None,
                       help="the name clients send as `model` and /v1/models lists (default: the model's name)")
    serve.add_argument("--model-alias", action="append", default=[], metavar="ALIAS[=MODEL]",
                       help="another name clients may send as `model`, e.g. my-embedder (repeatable; OpenAI's "
                            "and Cohere's embedding names are answered already unless --strict-model-names)")
    devices = serve.add_argument("--devices", type=device_list, default=None, metavar="LIST",
                                 help="one engine process per device, comma-separated: cpu, cuda:0,cuda:1, ... "
                                      "(default: every visible GPU, else the CPU)")
    hidden_alias(serve, "--device", devices)  # embed's spelling before both took --devices
    serve.add_argument("--frontend-workers", type=positive_int, default=None, metavar="K",
                       help="front-end processes feeding every engine (default: 1 on a CPU; on GPUs one per core "
                            "beyond 2, at most 14 per GPU)")
    serve.add_argument("--dtype", choices=DTYPES, default="auto",
                       help="auto: bfloat16 on a GPU and on a CPU that computes it natively (AVX512-BF16, AMX, "
                            "Arm BF16), else float32")
    serve.add_argument("--max-batch-tokens", type=positive_int, default=None,
                       help=f"token budget of one batch (default: {DEFAULT_MAX_BATCH_TOKENS}, "
                            "or the model's max sequence length where that is longer)")
    serve.add_argument("--max-seq-len", type=positive_int, default=None,
                       help="truncate inputs to this many tokens, at most the model's limit (default: the "
                            "model's limit)")
    serve.add_argument("--max-queued-tokens", type=positive_int, default=None,
                       help="the queue's bound: past it a new request gets 429 at once, unless it is small "
                            "(default: what the engines compute in --max-queue-seconds, at the speed measured "
                            "at warm-up)")
    serve.add_argument("--attention-backend", default="auto",
                       choices=["auto", "varlen", "packed", "flashinfer", "native", "sdpa"],
                       help="attention kernels (auto: on CUDA the fastest per batch shape, timed at warm-up; on the CPU "
                            "native where it runs, else sdpa. CUDA: varlen: torch's varlen_attn; packed: short texts "
                            "share tiles; flashinfer: the gpu extra. CPU: native: C kernels for bf16 on "
                            "AVX512-BF16 and float32 on AVX2; sdpa: torch's SDPA)")
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"],
                       help="least severe log lines shown (debug adds every /health and /metrics request)")
    serve.add_argument("--max-request-tokens", type=positive_int, default=300_000,
                       help="most tokens one request may embed, summed over its inputs (400 above)")
    serve.add_argument("--long-inputs", choices=LONG_INPUT_MODES, default="truncate",
                       help="inputs over the model's limit: truncate them, chunk (embed them window by window and "
                            "average), or error (OpenAI's 400); a request's `long_inputs` overrides it")
    serve.add_argument("--api-key", type=api_key, action="append", default=[], metavar="KEY",
                       help=f"require `Authorization: Bearer KEY` (repeatable; also ${API_KEY_ENV}, comma-separated)")
    serve.add_argument("--token-ids", choices=["cl100k", "model"], default="cl100k",
                       help="token-id input: cl100k (OpenAI's ids, as LangChain sends them; re-tokenized) "
                            "or model (the served model's own ids)")
    tuning = serve.add_argument_group("advanced (shown by --help-all)")
    advanced(tuning.add_argument("--strict-model-names", action="store_true",
                                 help="answer OpenAI's and Cohere's embedding model names (text-embedding-3-small, "
                                      "embed-english-v3.0, ...) with a 404 unless given by --model-alias, instead "
                                      "of with the served model"))
    advanced(tuning.add_argument("--max-rerank-documents", type=positive_int,
                                 default=ServerConfig.max_rerank_documents,
                                 help="most documents one rerank request may score (400 above)"))
    advanced(tuning.add_argument("--max-batch-seqs", type=positive_int, default=None,
                                 help=f"most sequences (output rows) in one batch (default {EngineConfig.max_batch_seqs}, "
                                      "or the most rows one text of a ColBERT or BGE-M3 model gives, if more)"))
    advanced(tuning.add_argument("--api-keys-file", default=None, metavar="PATH",
                                 help="more keys, one a line, each optionally followed by a weight: its requests' "
                                      "share of each batch against others' (default 1; e.g. 0.25 for an indexing "
                                      "job's key)"))
    advanced(tuning.add_argument("--max-queue-seconds", type=positive_seconds, default=ServerConfig.max_queue_seconds,
                                 help="without --max-queued-tokens, the queue holds what the engines compute in "
                                      "this many seconds"))
    advanced(tuning.add_argument("--scheduling", choices=SCHEDULING_POLICIES, default=EngineConfig.scheduling,
                                 help="fair: each batch shared among the requests that wait, so that a one-text "
                                      "query is not held behind bulk requests; fcfs: strict arrival order"))
    advanced(tuning.add_argument("--tokenizer-workers", type=positive_int, default=2,
                                 help="threads of each front end that tokenize requests"))
    advanced(tuning.add_argument("--part-processes", type=whole_number, default=None, metavar="N",
                                 help="processes shared by the front ends that tokenize large requests' parts and "
                                      "encode their vectors side by side (default: half the cores, at most 8, on a "
                                      "GPU server; none on a CPU server; 0: none)"))
    advanced(tuning.add_argument("--num-threads", type=positive_int, default=None,
                                 help="torch threads of each CPU engine (default: the cores, shared among CPU engines)"))
    advanced(tuning.add_argument("--enforce-eager", action="store_true",
                                 help="GPU: run every batch eagerly, no CUDA graphs; CPU with --quantization int8: "
                                      "no compiling (starts in seconds, runs slower)"))
    advanced(tuning.add_argument("--no-fused-kernels", dest="fused_kernels", action="store_false",
                                 help="GPU: plain PyTorch instead of the fused Triton kernels between the matmuls"))
    advanced(tuning.add_argument("--lazy-capture", action="store_true",
                                 help="GPU: start serving sooner and capture each CUDA graph on its second batch "
                                      "instead of all of them before /health turns 200"))
    advanced(tuning.add_argument("--quantization", choices=QUANTIZATIONS, default=None,
                                 help="fp8: the linear layers as e4m3 GEMMs, on GPUs of compute capability 8.9 or "
                                      "newer (Ada, Hopper); BERT family and Qwen3 embedders (docs/fp8.md). int8: "
                                      "int8 linear layers on a CPU with AVX512-VNNI or AMX, compiled at start "
                                      "(docs/cpu-int8.md). Default: none"))
    advanced(tuning.add_argument("--fp8-bf16-layers", type=whole_number, default=None, metavar="N",
                                 help=FP8_BF16_LAYERS_HELP))
    advanced(tuning.add_argument("--fp8-weight-rounding", choices=FP8_WEIGHT_ROUNDINGS, default=None,
                                 help=FP8_WEIGHT_ROUNDING_HELP))
    advanced(tuning.add_argument("--fp8-pooled-tokens", choices=FP8_POOLED_TOKENS, default=None,
                                 help=FP8_POOLED_TOKENS_HELP))
    _add_model_flags(serve)
    hardening_cli.add_arguments(serve, tuning)
    embed_cli.add_parser(commands, HelpFormatter)
    return parser


def _add_model_flags(serve: argparse.ArgumentParser) -> None:
    """Overrides of what the checkpoint says about itself (engine/model_files/flavour.py has the rules)."""
    group = serve.add_argument_group("model flavour (default: read from the checkpoint)")
    advanced(group.add_argument("--attention", choices=["causal", "bidirectional"], default=None,
                                help="attention mask (default: bidirectional for pplx-embed or "
                                     "use_bidirectional_attention, causal for other decoders)"))
    advanced(group.add_argument("--pooling", choices=POOLING_MODES, default=None,
                                help="pooling (default: the sentence-transformers Pooling module, else last for "
                                     "causal decoders, mean)"))
    advanced(group.add_argument("--embedding-quantization", choices=["none", "tanh"], default=None,
                                help="tanh: offer int8 = round(127*tanh(x)) and sign-bit formats "
                                     "(default: on for pplx-embed)"))
    advanced(group.add_argument("--model-kind", choices=KINDS, default=None,
                                help="embed, rerank or classify (default: from the files; a one-label "
                                     "*ForSequenceClassification or a CrossEncoder save reranks, one of several labels "
                                     "classifies; Qwen3-Reranker needs rerank unless its files say CrossEncoder)"))
    advanced(group.add_argument("--max-active-dims", type=positive_int, default=None, metavar="N",
                                help="sparse encoders (SPLADE): keep each text's N largest values, as "
                                     "SparseEncoder.encode(max_active_dims=N) (default: the checkpoint's, else every "
                                     f"non-zero, up to {MAX_UNCUT_DIMS}: a text with more is refused)"))
    group.add_argument("--default-prompt-name", default=None,
                       help="prompt applied when a request names none ('' for none; default: the model's)")
    group.add_argument("--matryoshka-dims", type=matryoshka_sizes, default=None,
                       help="sizes allowed as `dimensions`: 'any', 'none' or e.g. '128,256,512' "
                            "(default: config.json matryoshka_dimensions, else any)")


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    """The server's configuration; ValueError names a flag whose value does not fit the others."""
    from rose_embed.server.processes.topology import default_front_ends, default_part_processes, parse_devices

    devices = parse_devices(args.devices)  # named ones were checked as the flag was parsed
    if refusal := quantization_refusal(args.quantization, devices, args.dtype):
        raise ValueError(f"argument --quantization: {refusal}")
    if refusal := attention_refusal(args.attention_backend, devices, args.dtype):
        raise ValueError(f"argument --attention-backend: {refusal}")
    fp8_plan = fp8_plan_of(args.quantization, args.fp8_bf16_layers, args.fp8_weight_rounding, args.fp8_pooled_tokens)
    (first_name, first_model), *extra_models = args.model or [(None, None)]
    if first_name is not None and args.served_model_name is not None:
        raise ValueError(f"--served-model-name {args.served_model_name} and --model {first_name}=... both name the "
                         "first model; give one")
    key_weights = keys_from_file(args.api_keys_file) if args.api_keys_file is not None else []
    engine = EngineConfig(
        model=first_model, revision=args.revision, device=devices[0], dtype=args.dtype,
        max_batch_tokens=args.max_batch_tokens or DEFAULT_MAX_BATCH_TOKENS,
        choose_batch_tokens=args.max_batch_tokens is None, scheduling=args.scheduling,
        max_batch_seqs=args.max_batch_seqs or EngineConfig.max_batch_seqs, max_seq_len=args.max_seq_len,
        num_threads=args.num_threads,
        attention_backend=args.attention_backend, enforce_eager=args.enforce_eager,
        fused_kernels=args.fused_kernels, quantization=args.quantization, fp8_plan=fp8_plan,
        capture_at_start=not args.lazy_capture,
        model_overrides=ModelOverrides(
            attention=args.attention, pooling=args.pooling, quantization=args.embedding_quantization,
            default_prompt_name=args.default_prompt_name, matryoshka_dims=args.matryoshka_dims,
            kind=args.model_kind, max_active_dims=args.max_active_dims,
        ),
    )
    api_keys = tuple(dict.fromkeys([*args.api_key, *keys_from_env(), *(key for key, _ in key_weights)]))
    if args.protect_metrics_and_docs and not api_keys:
        raise ValueError(f"argument --protect-metrics-and-docs: needs --api-key (or ${API_KEY_ENV}); without a key "
                         "no route is protected")
    front_ends = args.frontend_workers or default_front_ends(devices)
    part_processes = default_part_processes(devices) if args.part_processes is None else args.part_processes
    return ServerConfig(
        engine=engine, host=args.host, port=args.port, served_model_name=args.served_model_name or first_name,
        extra_models=tuple(ExtraModel(model, name) for name, model in extra_models),
        max_queued_tokens=args.max_queued_tokens, max_queue_seconds=args.max_queue_seconds,
        tokenizer_workers=args.tokenizer_workers,
        part_processes=part_processes, devices=devices, frontend_workers=front_ends,
        log_level=args.log_level, max_request_tokens=args.max_request_tokens,
        max_rerank_documents=args.max_rerank_documents, long_inputs=args.long_inputs,
        model_aliases=tuple(args.model_alias), strict_model_names=args.strict_model_names,
        api_keys=api_keys, api_key_weights=tuple((key, weight) for key, weight in key_weights if weight != 1.0),
        token_ids=args.token_ids, **hardening_cli.config_kwargs(args),
    )


def serve(config: ServerConfig, budget_is_default: bool = False, seqs_is_default: bool = False) -> None:
    """Check what the flags ask for, bind the port, then serve until a signal stops the server.

    Everything that can be refused is refused before the port is bound, and the port is bound
    before anything starts: no engine process, no shared memory, no banner before it holds.
    """
    from rose_embed.engine.model_files.loader import ModelLoadError
    from rose_embed.engine.text.tokenizer import tokenizer_for
    from rose_embed.server.config import load_specs
    from rose_embed.server.cli.flag_checks import (
        capped_seq_len_warning, flavour_flag_refusal, model_flag_refusal, rows_per_text, served_names,
    )
    from rose_embed.server.http.logs import configure_logging

    try:
        specs = load_specs(config)  # fail fast
    except (ModelLoadError, ValueError) as exc:
        if refusal := flavour_flag_refusal(config.engine):
            _usage_error(refusal)
        sys.exit(f"rose-embed: {exc}")
    longest = max(spec.max_seq_len for spec in specs)
    if config.engine.max_batch_tokens < longest and budget_is_default:
        # A 32k-context model must still fit one whole sequence into a batch.
        config = replace(config, engine=replace(config.engine, max_batch_tokens=longest))
    most_rows = rows_per_text(specs)[0]
    if config.engine.max_batch_seqs < most_rows and seqs_is_default:
        # A ColBERT or BGE-M3 text gives a row per token: a batch must hold one whole text's.
        config = replace(config, engine=replace(config.engine, max_batch_seqs=most_rows))
    if refusal := model_flag_refusal(config, specs):
        _usage_error(refusal)
    try:
        for spec in specs:  # the front ends read each tokenizer again: here, a broken one is one line
            tokenizer_for(spec)
    except (ModelLoadError, ValueError) as exc:
        sys.exit(f"rose-embed: {exc}")
    configure_logging(config.log_level, config.log_format)
    for warning in (capped_seq_len_warning(config.engine.max_seq_len, specs), port_env_warning(config.port)):
        if warning:
            logging.getLogger("rose_embed.server").warning("%s", warning)
    from rose_embed.server.processes.supervisor import run_supervisor

    sockets = _listen(config)
    _banner(config, ", ".join(served_names(config, specs)))
    run_supervisor(config, specs, sockets)


def _listen(config: ServerConfig) -> list[socket.socket]:
    try:
        return bind_sockets(config.host, config.port, config.frontend_workers)
    except ListenError as exc:
        sys.exit(f"rose-embed: {exc}")


def _banner(config: ServerConfig, name: str) -> None:
    print(f"rose-embed: serving {name} on http://{address(config.host, config.port)}/v1 "
          "(GET /health turns 200 once ready)",
          flush=True)


def _usage_error(message: str) -> None:
    """A flag value that is wrong only beside the others or the model: as argparse reports one (status 2)."""
    print(f"rose-embed serve: error: {message}", file=sys.stderr)
    sys.exit(2)


def _hang_up_as_terminate() -> None:
    """A closed terminal (SIGHUP) stops the server as SIGTERM does, draining and freeing its
    shared memory, rather than killing it outright."""
    signal.signal(signal.SIGHUP, lambda *_: signal.raise_signal(signal.SIGTERM))


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "serve":
            _serve_command(args)
        elif args.command == "embed":
            embed_cli.run(args)
    except KeyboardInterrupt:  # Ctrl-C while loading, or after the server drained
        sys.excepthook = _silent_about_interrupts(sys.excepthook)
        raise


def _silent_about_interrupts(excepthook):
    def hook(kind, value, traceback):
        if not issubclass(kind, KeyboardInterrupt):
            excepthook(kind, value, traceback)
    return hook


def _serve_command(args: argparse.Namespace) -> None:
    _hang_up_as_terminate()
    try:
        config = config_from_args(args)
    except ValueError as exc:
        _usage_error(str(exc))
    serve(config, budget_is_default=args.max_batch_tokens is None, seqs_is_default=args.max_batch_seqs is None)


if __name__ == "__main__":
    main()
