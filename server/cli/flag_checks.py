"""Flag values checked against the models' files once the CLI has read them (no weights yet):
a value the files cannot take is a flag error that names the flag (status 2), as argparse
words one, not a failed load; a value they take only in part is one warning line."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from rose_embed.engine.contract.config import EngineConfig, ModelOverrides
from rose_embed.engine.model_files.loader import ModelLoadError, ModelSpec, load_spec
from rose_embed.server.config import ServerConfig

# The model-flavour flags whose values only the files can judge: the sizes a model's output
# allows, and the prompts it ships.
_FLAVOUR_FLAGS = (("--matryoshka-dims", "matryoshka_dims"), ("--default-prompt-name", "default_prompt_name"))


def flavour_flag_refusal(engine: EngineConfig) -> str | None:
    """Which of --matryoshka-dims and --default-prompt-name the first model's files refuse
    ("argument --matryoshka-dims: ..."); None where neither was given, or where the files fail
    without them too (the files are at fault then, not the flags).

    The loader itself judges, given one flag at a time: the rules stay in one place
    (engine/model_files/flavour.py)."""
    overrides = engine.model_overrides
    plain = replace(overrides, **{field: None for _, field in _FLAVOUR_FLAGS})
    if plain == overrides or _load_problem(engine, plain) is not None:
        return None
    for flag, field in _FLAVOUR_FLAGS:
        value = getattr(overrides, field)
        if value is not None and (problem := _load_problem(engine, replace(plain, **{field: value}))):
            return f"argument {flag}: {problem}"
    return None


def served_names(config: ServerConfig, specs: Sequence[ModelSpec]) -> list[str]:
    """The name each model is served as, the first (default) model's first."""
    return [config.served_model_name or specs[0].name,
            *(extra.served_name or spec.name for extra, spec in zip(config.extra_models, specs[1:]))]


def model_flag_refusal(config: ServerConfig, specs: Sequence[ModelSpec]) -> str | None:
    """The first flag the served models' files refuse, as argparse words it: a --quantization a
    model cannot take, a --max-batch-tokens too small for one whole text, two models served as one
    name, a --model-alias that cannot be (server/pipeline/aliases.py); None where every one fits."""
    from rose_embed.engine.rose.quantization.support import model_refusal
    from rose_embed.server.pipeline.aliases import AliasError, resolve_aliases

    if config.engine.quantization is not None:
        for spec in specs:
            if refusal := model_refusal(config.engine.quantization, spec.architecture, spec.name, spec.kind):
                return f"argument --quantization: {refusal}"
    if refusal := batch_tokens_refusal(config.engine.max_batch_tokens, specs):
        return refusal
    if refusal := batch_seqs_refusal(config.engine.max_batch_seqs, specs):
        return refusal
    names = served_names(config, specs)
    if repeated := next((name for i, name in enumerate(names) if name in names[:i]), None):
        return f"argument --model: two models would be served as {repeated!r}; name them with --model NAME=PATH"
    try:
        resolve_aliases(config.model_aliases, names[0], tuple(names[1:]))
    except AliasError as exc:
        return str(exc)  # it names --model-alias
    return None


def batch_tokens_refusal(max_batch_tokens: int, specs: Sequence[ModelSpec]) -> str | None:
    """--max-batch-tokens below the longest max sequence length of the models: a text as long as
    its model takes must fit one batch."""
    longest = max(spec.max_seq_len for spec in specs)
    if max_batch_tokens >= longest:
        return None
    whose = "the models' longest" if len(specs) > 1 else "the model's"
    return (f"argument --max-batch-tokens: must be at least {whose} max sequence length ({longest}); "
            f"got {max_batch_tokens}")


def rows_per_text(specs: Sequence[ModelSpec]) -> tuple[int, ModelSpec | None, str]:
    """The most output rows one text of the served models gives where that is more than one: a ColBERT
    model's, one per kept token up to its query or document length; a BGE-M3 model's asked for its
    sparse or colbert output, one per token up to its max sequence length. With the model and how to
    say it; (0, None, "") where every model gives a text one row."""
    most, spec, what = 0, None, ""
    for candidate in specs:
        if candidate.colbert is not None:
            rows = max(candidate.colbert.query_length, candidate.colbert.document_length)
            kind = "a ColBERT model whose texts give up to {} vectors (one per kept token)"
        elif candidate.m3 is not None:
            rows = candidate.max_seq_len
            kind = ("a BGE-M3 model whose texts give up to {} rows (one per token) for sparse or colbert outputs; "
                    "or lower --max-seq-len")
        else:
            continue
        if rows > most:
            most, spec, what = rows, candidate, kind.format(rows)
    return most, spec, what


def batch_seqs_refusal(max_batch_seqs: int, specs: Sequence[ModelSpec]) -> str | None:
    """--max-batch-seqs below the rows one text gives (`rows_per_text`): every output row of a text must
    fit one batch. Where the flag is not given, serve raises the default to that instead."""
    most, spec, what = rows_per_text(specs)
    if spec is None or max_batch_seqs >= most:
        return None
    return f"argument --max-batch-seqs: must be at least {most} for {spec.name}, {what}; got {max_batch_seqs}"


def capped_seq_len_warning(max_seq_len: int | None, specs: Sequence[ModelSpec]) -> str | None:
    """One line where --max-seq-len asks for more tokens than a model takes: the loader keeps
    each model to its own limit."""
    capped = [spec for spec in specs if max_seq_len is not None and spec.max_seq_len < max_seq_len]
    if not capped:
        return None
    limits = ", ".join(f"{spec.name} takes at most {spec.max_seq_len} tokens" for spec in capped)
    return f"--max-seq-len {max_seq_len} is above the model's limit, which is used instead: {limits}"


def _load_problem(engine: EngineConfig, overrides: ModelOverrides) -> str | None:
    try:
        load_spec(engine.model, engine.max_seq_len, overrides, engine.revision)
    except (ModelLoadError, ValueError) as exc:
        return str(exc)
    return None
