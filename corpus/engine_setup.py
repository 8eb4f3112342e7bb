"""Building the engine for a corpus job or a Ray actor, and the prompt its texts get."""

from __future__ import annotations

from dataclasses import fields

from rose_embed.engine.contract.config import EngineConfig, ModelOverrides
from rose_embed.engine.rose.cublas_workspace import give_cublas_no_workspace
from rose_embed.engine.rose.engine import Engine
from rose_embed.engine.model_files.loader import ModelSpec, load_spec


def build_engine(**options) -> Engine:
    """An Engine from EngineConfig's fields (model, device, dtype, max_batch_tokens, ...).

    Without `max_batch_tokens`, the budget is the serve command's default, raised to the
    model's max sequence length where that is longer, so one whole text always fits a batch.
    """
    known = {f.name for f in fields(EngineConfig)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(f"unknown engine options {unknown}; known: {sorted(known)}")
    if options.get("max_batch_tokens") is None:
        spec = load_spec(options.get("model"), options.get("max_seq_len"),
                         options.get("model_overrides") or ModelOverrides(), options.get("revision"))
        options["max_batch_tokens"] = max(EngineConfig.max_batch_tokens, spec.max_seq_len)
    give_cublas_no_workspace()  # this process is the job's own
    engine = Engine(EngineConfig(**options))
    if engine.config.quantization == "int8" and not engine.config.enforce_eager:
        # The int8 model compiles on its first batch, for most of a minute: do it before the job's
        # clock starts, so the progress bar's texts/s reads the speed the job runs at.
        engine.warm_up()
    return engine


def prompt_for(spec: ModelSpec, prompt_name: str | None) -> str:
    """The prefix a named prompt of the model stands for; without a name, the model's default
    prompt (as the server applies it to a request that names none), else none."""
    if prompt_name is None:
        name = spec.default_prompt_name
        return spec.prompts.get(name, "") if name else ""
    if prompt_name not in spec.prompts:
        known = ", ".join(repr(n) for n in spec.prompts) or "none"
        raise ValueError(f"prompt {prompt_name!r} is not one of this model's prompts ({known})")
    return spec.prompts[prompt_name]
