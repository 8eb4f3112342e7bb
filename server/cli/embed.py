"""`rose-embed embed INPUT -o OUTPUT`: a file of texts -> a file of vectors (docs/corpus.md)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from rose_embed.engine.contract.config import LONG_INPUT_MODES, POOLING_MODES, EngineConfig
from rose_embed.engine.rose.quantization.support import QUANTIZATIONS
from rose_embed.server.cli.help import hidden_alias
from rose_embed.server.cli.values import (DTYPES, FP8_BF16_LAYERS_HELP, FP8_POOLED_TOKENS, FP8_POOLED_TOKENS_HELP,
                               FP8_WEIGHT_ROUNDING_HELP, FP8_WEIGHT_ROUNDINGS, attention_refusal, device, fp8_plan_of,
                               positive_int, quantization_refusal, whole_number)

_DEFAULT_CHUNK_SIZE = 10_000  # corpus.job.DEFAULT_CHUNK_SIZE, kept here so --help imports no torch


def add_parser(commands, formatter_class: type[argparse.HelpFormatter]) -> None:
    embed = commands.add_parser(
        "embed", help="embed a JSONL or Parquet file of texts into Parquet or NumPy (resumable)",
        formatter_class=formatter_class,
        # A short usage line, as serve's: argparse prints it above every flag error.
        usage="%(prog)s INPUT -o OUTPUT [flags]",
        description="Embed every row of INPUT into OUTPUT, in input order. Work is committed chunk by chunk "
                    "in OUTPUT.parts/; run the same command again after an interruption to continue.",
    )
    embed.add_argument("input", type=Path, metavar="INPUT", help="a .jsonl (or .jsonl.gz) or .parquet file")
    embed.add_argument("-o", "--output", type=Path, required=True, default=argparse.SUPPRESS,
                       help="a .parquet or .npy file (written in input order)")
    embed.add_argument("--format", dest="output_format", choices=["parquet", "npy"], default=None,
                       help="output format (default: from OUTPUT's suffix)")
    embed.add_argument("--input-format", choices=["jsonl", "parquet"], default=None,
                       help="input format (default: from INPUT's suffix)")
    embed.add_argument("--text-field", default="text", help="the field (JSONL) or column (Parquet) holding the text")
    embed.add_argument("--chunks-field", default=None, metavar="FIELD",
                       help="a field (JSONL) or list<string> column (Parquet) holding each row's document as the list "
                            "of its chunks, in order: every chunk gets its own vector, read in the context of its "
                            "document (late chunking; the model must be bidirectional with mean pooling); OUTPUT then "
                            "has one row per chunk (default: none; --text-field holds one text per row)")
    embed.add_argument("--id-field", default=None,
                       help="a field carried into the output beside each vector (default: none; rows keep input order)")
    embed.add_argument("--chunk-size", type=positive_int, default=_DEFAULT_CHUNK_SIZE,
                       help="rows per committed chunk: the most work an interruption can lose")
    embed.add_argument("--prompt-name", default=None, help="one of the model's prompts (default: the model's default)")
    embed.add_argument("--long-inputs", choices=LONG_INPUT_MODES, default="truncate",
                       help="texts over the model's limit: truncate them, chunk (embed them window by window and "
                            "average), or error (stop, naming the text)")
    embed.add_argument("--overwrite", action="store_true",
                       help="replace OUTPUT and discard an unfinished run of it made with another model or input")
    embed.add_argument("--quiet", action="store_true", help="no progress bar and no summary line")
    model = embed.add_argument_group("model and engine (as for serve)")
    model.add_argument("--model", default=None,
                       help="local model directory or Hugging Face hub id (default: the embedded all-MiniLM-L6-v2)")
    model.add_argument("--revision", default=None,
                       help="a hub id's branch, tag or commit hash (default: its default branch)")
    # Spelt as serve's flag, though embed runs one engine and so takes one device.
    devices = model.add_argument("--devices", dest="device", type=device, default="auto", metavar="DEVICE",
                                 help="the one device the engine runs on: auto, cpu, cuda or cuda:N")
    hidden_alias(model, "--device", devices)
    model.add_argument("--dtype", choices=DTYPES, default="auto",
                       help="auto (bf16 on CUDA and on CPUs that compute it natively, else fp32), float32, "
                            "bfloat16, float16")
    model.add_argument("--max-batch-tokens", type=positive_int, default=None,
                       help="token budget of one batch (default: 16384, or the model's max length where longer)")
    model.add_argument("--max-batch-seqs", type=positive_int, default=EngineConfig.max_batch_seqs,
                       help="most sequences in one batch")
    model.add_argument("--max-seq-len", type=positive_int, default=None,
                       help="truncate texts to this many tokens, at most the model's limit (default: the "
                            "model's limit)")
    model.add_argument("--num-threads", type=positive_int, default=None,
                       help="torch CPU threads (default: torch's own count, at most the cores this process may "
                            "use: its affinity and CPU quota)")
    model.add_argument("--attention-backend", default="auto", choices=["auto", "varlen", "packed", "flashinfer", "native", "sdpa"],
                       help="ragged attention kernels (auto: on CUDA the fastest per batch shape, on the CPU the native "
                            "kernel where it runs, else sdpa)")
    model.add_argument("--enforce-eager", action="store_true", help="CUDA: no CUDA graphs; CPU with --quantization int8: no compiling (starts in seconds, runs slower)")
    model.add_argument("--no-fused-kernels", dest="fused_kernels", action="store_false",
                       help="CUDA: plain PyTorch instead of the fused Triton kernels between the matmuls")
    model.add_argument("--quantization", choices=QUANTIZATIONS, default=None,
                       help="fp8: the linear layers as e4m3 GEMMs, on GPUs of compute capability 8.9 or newer; "
                            "BERT family and Qwen3 embedders (docs/fp8.md). int8: int8 linear layers on a CPU "
                            "with AVX512-VNNI or AMX, compiled at start (docs/cpu-int8.md). Default: none")
    model.add_argument("--fp8-bf16-layers", type=whole_number, default=None, metavar="N", help=FP8_BF16_LAYERS_HELP)
    model.add_argument("--fp8-weight-rounding", choices=FP8_WEIGHT_ROUNDINGS, default=None,
                       help=FP8_WEIGHT_ROUNDING_HELP)
    model.add_argument("--fp8-pooled-tokens", choices=FP8_POOLED_TOKENS, default=None, help=FP8_POOLED_TOKENS_HELP)
    model.add_argument("--attention", choices=["causal", "bidirectional"], default=None,
                       help="override the checkpoint's attention mask (default: from the checkpoint)")
    model.add_argument("--pooling", choices=POOLING_MODES, default=None,
                       help="override the checkpoint's pooling (default: from the checkpoint)")
    embed.add_argument("--engine-plugin", default=None, help=argparse.SUPPRESS)  # fault injection in tests


def run(args: argparse.Namespace) -> None:
    from rose_embed.corpus.engine_setup import build_engine, prompt_for
    from rose_embed.corpus.job import CorpusJob, preflight, run_job, what_an_interrupt_kept
    from rose_embed.corpus.manifest import JobMismatchError
    from rose_embed.corpus.optional import MissingDependencyError
    from rose_embed.corpus.parts import output_format_of
    from rose_embed.corpus.source import CorpusInputError
    from rose_embed.engine.contract.config import ModelOverrides
    from rose_embed.engine.rose.pipeline import refuse_non_embedder
    from rose_embed.engine.model_files.loader import ModelLoadError, load_spec

    _refuse_what_the_device_cannot_run(args)
    try:
        fp8_plan = fp8_plan_of(args.quantization, args.fp8_bf16_layers, args.fp8_weight_rounding,
                               args.fp8_pooled_tokens)
    except ValueError as exc:
        _usage_error(str(exc))
    try:
        output_format = args.output_format or output_format_of(args.output)
        job = CorpusJob(
            input=args.input, output=args.output, output_format=output_format, input_format=args.input_format,
            text_field=args.text_field, id_field=args.id_field, chunk_size=args.chunk_size,
            long_inputs=args.long_inputs, chunks_field=args.chunks_field, overwrite=args.overwrite, quiet=args.quiet,
        )
        preflight(job)
        overrides = ModelOverrides(attention=args.attention, pooling=args.pooling)
        # The model's files, not its weights: what they say is checked before the weights load,
        # and before the job touches its output.
        _check_flags_against(args, load_spec(args.model, args.max_seq_len, overrides, args.revision))
        engine = build_engine(
            model=args.model, revision=args.revision, device=args.device, dtype=args.dtype,
            max_batch_tokens=args.max_batch_tokens,
            max_batch_seqs=args.max_batch_seqs, max_seq_len=args.max_seq_len, num_threads=args.num_threads,
            attention_backend=args.attention_backend, enforce_eager=args.enforce_eager,
            fused_kernels=args.fused_kernels, quantization=args.quantization, fp8_plan=fp8_plan,
            model_overrides=overrides,
        )
        refuse_non_embedder(engine)  # before the job writes anything
        if args.engine_plugin:
            from rose_embed.server.processes.plugins import load_engine_plugin

            load_engine_plugin(args.engine_plugin)(engine)
        report = run_job(engine, replace(job, prompt=prompt_for(engine.spec, args.prompt_name)))
    except (CorpusInputError, JobMismatchError, MissingDependencyError, FileExistsError, ModelLoadError,
            ValueError) as exc:
        hint = " (pass --overwrite to start over)" if isinstance(exc, JobMismatchError) else ""
        sys.exit(f"rose-embed embed: {exc}{hint}")
    except KeyboardInterrupt:
        print(f"\nrose-embed embed: interrupted; {what_an_interrupt_kept(args.output)}", file=sys.stderr)
        raise
    if not args.quiet:
        resumed = f", {report.num_resumed} of them done by an earlier run" if report.num_resumed else ""
        rate = report.num_computed / report.seconds if report.seconds else 0.0
        print(f"rose-embed embed: {report.num_rows} texts{resumed} -> {args.output} "
              f"in {report.seconds:.1f} s ({rate:.0f} texts/s)", file=sys.stderr)


def _refuse_what_the_device_cannot_run(args: argparse.Namespace) -> None:
    """--quantization or --attention-backend on a device or dtype it cannot run on: one line and
    status 2, as serve says it."""
    if args.quantization is None and args.attention_backend == "auto":
        return  # nothing to check: torch and the GPU driver stay unasked
    from rose_embed.server.processes.topology import visible_gpus

    where = args.device if args.device != "auto" else ("cuda" if visible_gpus() else "cpu")
    if refusal := quantization_refusal(args.quantization, (where,), args.dtype):
        _usage_error(f"argument --quantization: {refusal}")
    if refusal := attention_refusal(args.attention_backend, (where,), args.dtype):
        _usage_error(f"argument --attention-backend: {refusal}")


def _check_flags_against(args: argparse.Namespace, spec) -> None:
    """The flags the model's files judge, as serve judges them: --quantization on a model it does
    not serve and a --max-batch-tokens that cannot hold one whole text are one line and status 2;
    a --max-seq-len past the model's limit is one warning; a --prompt-name the model lacks is one
    line and status 2; --chunks-field on a model that cannot embed chunks in context, a ValueError."""
    from rose_embed.corpus.engine_setup import prompt_for
    from rose_embed.engine.rose.quantization.support import model_refusal
    from rose_embed.engine.text.late_chunking import late_chunking_problem
    from rose_embed.server.cli.flag_checks import batch_tokens_refusal, capped_seq_len_warning

    if args.quantization is not None and (
            refusal := model_refusal(args.quantization, spec.architecture, spec.name, spec.kind)):
        _usage_error(f"argument --quantization: {refusal}")
    if args.max_batch_tokens is not None and (refusal := batch_tokens_refusal(args.max_batch_tokens, [spec])):
        _usage_error(refusal)
    if warning := capped_seq_len_warning(args.max_seq_len, [spec]):
        print(f"rose-embed embed: warning: {warning}", file=sys.stderr)
    try:
        prompt_for(spec, args.prompt_name)
    except ValueError as exc:
        _usage_error(f"argument --prompt-name: {exc}")
    if args.chunks_field is not None and (problem := late_chunking_problem(spec)) is not None:
        raise ValueError(f"--chunks-field: this model cannot embed chunks in the context of their document: {problem}")


def _usage_error(message: str) -> None:
    print(f"rose-embed embed: error: {message}", file=sys.stderr)
    sys.exit(2)
