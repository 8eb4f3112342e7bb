"""Value types of the command-line flags: argparse turns each wrong value into one line that
names the flag and what it allows, and exit status 2, before anything has started."""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from dataclasses import replace

from rose_embed.engine.contract.config import NARROW_BF16_FIRST_LAYERS, POST_NORM_BF16_FIRST_LAYERS, WIDE_BF16_FIRST_LAYERS, Fp8Plan

DTYPES = ("auto", "float32", "bfloat16", "float16")
_DEVICE = re.compile(r"cpu|cuda(:\d+)?")


def model_choice(value: str) -> tuple[str | None, str]:
    """`--model PATH_OR_ID` or `--model NAME=PATH_OR_ID` -> (served name or None, path or hub id).
    A directory whose own name holds "=" is taken whole."""
    import os

    if not value.strip():  # else read as the current directory, which the user never named
        raise argparse.ArgumentTypeError(f"expected PATH, HUB_ID or NAME=PATH; got {value!r}")
    name, sep, where = value.partition("=")
    if not sep or os.path.exists(value):
        return None, value
    if not name.strip() or not where.strip():
        raise argparse.ArgumentTypeError(f"expected PATH, HUB_ID or NAME=PATH; got {value!r}")
    return name.strip(), where.strip()


def non_empty(value: str) -> str:
    """A name or an address: an empty one would quietly count as none given (--host '' listens on
    every interface, --served-model-name '' serves the model's own name), so it is refused."""
    if not value.strip():
        raise argparse.ArgumentTypeError(f"must not be empty; got {value!r}")
    return value


def positive_int(value: str) -> int:
    number = _parse(value, int, "a whole number")
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1; got {value}")
    return number


def whole_number(value: str) -> int:
    number = _parse(value, int, "a whole number")
    if number < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more; got {value}")
    return number


def api_key(value: str) -> str:
    """A key as a client's bearer token carries it: spaces around it dropped (as the server drops
    them from the token, and from $ROSE_EMBED_API_KEY's keys); an empty one is refused, since no
    request could send it and every one would get 401."""
    key = value.strip()
    if not key:
        raise argparse.ArgumentTypeError(f"must not be empty (no request could send it, so every one would get "
                                         f"401); got {value!r}")
    return key


def matryoshka_sizes(value: str) -> str:
    """--matryoshka-dims: 'any', 'none' or sizes of at least 1 (kept as written: the loader reads
    it, and whether the sizes fit the model's output is known once its files are read)."""
    from rose_embed.engine.model_files.flavour import FlavourError, parse_matryoshka_dims

    try:
        parse_matryoshka_dims(value, full_size=sys.maxsize)
    except FlavourError:
        raise argparse.ArgumentTypeError(f"must be 'any', 'none' or sizes of at least 1 such as 128,256,512; "
                                         f"got {value!r}") from None
    return value


class EnvironmentValue(str):
    """A flag's default read from the environment variable `variable`: argparse converts a string
    default as it converts a typed value, and the type's error then names the variable."""

    variable: str


def from_environment(variable: str, default):
    """`variable`'s value where it is set and not blank, else `default`."""
    value = os.environ.get(variable, "").strip()
    if not value:
        return default
    text = EnvironmentValue(value)
    text.variable = variable
    return text


def port_number(value: str) -> int:
    try:
        number = _parse(value, int, "a whole number")
        if not 1 <= number <= 65535:
            raise argparse.ArgumentTypeError(f"must be a TCP port, 1 to 65535; got {value}")
    except argparse.ArgumentTypeError as exc:
        if isinstance(value, EnvironmentValue):
            raise argparse.ArgumentTypeError(f"{exc} (from ${value.variable})") from None
        raise
    return number


def positive_seconds(value: str) -> float:
    seconds = _parse(value, float, "a number of seconds")
    if not seconds > 0 or math.isinf(seconds):
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0; got {value}")
    return seconds


def seconds_or_zero(value: str) -> float:
    seconds = _parse(value, float, "a number of seconds")
    if not seconds >= 0 or math.isinf(seconds):
        raise argparse.ArgumentTypeError(f"must be a number of seconds, 0 or more; got {value}")
    return seconds


def device(value: str) -> str:
    """auto, cpu, cuda or cuda:N, where a named GPU must be visible to torch."""
    if "," in value:
        raise argparse.ArgumentTypeError(f"takes one device (this command runs one engine); got {value!r}")
    if value != "auto" and not _DEVICE.fullmatch(value):
        raise argparse.ArgumentTypeError(f"must be auto, cpu, cuda or cuda:N; got {value!r}")
    _check_visible((value,))
    return value


def device_list(value: str) -> str:
    """A comma-separated list of cpu, cuda or cuda:N (kept as written: the CLI splits it)."""
    names = [name.strip() for name in value.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError("must name at least one device, e.g. cuda:0,cuda:1")
    for name in names:
        if not _DEVICE.fullmatch(name):
            raise argparse.ArgumentTypeError(f"takes cpu, cuda or cuda:N names, comma-separated; got {name!r}")
    _check_visible(tuple(names))
    return value


def quantization_refusal(quantization: str | None, devices: tuple[str, ...], dtype: str) -> str | None:
    """Why --quantization cannot run on these devices at this --dtype (one line), or None."""
    if quantization is None:
        return None
    from rose_embed.engine.rose.quantization.support import device_refusal, dtype_refusal

    for name in devices:
        if refusal := device_refusal(quantization, "cuda:0" if name == "cuda" else name):
            return refusal
    return dtype_refusal(quantization, dtype)


def attention_refusal(backend: str, devices: tuple[str, ...], dtype: str) -> str | None:
    """Why --attention-backend cannot run on these devices at this --dtype (one line), or None,
    as far as the engine can tell before a model loads (engine/rose/attention/backends.py)."""
    if backend == "auto":
        return None  # it picks a backend that runs; torch stays unimported
    import torch

    from rose_embed.engine.rose.engine import resolve_dtype
    from rose_embed.engine.rose.attention.backends import device_refusal

    for name in devices:
        device = torch.device(name)
        if refusal := device_refusal(backend, device, resolve_dtype(dtype, device)[0]):
            return refusal
    return None


FP8_BF16_LAYERS_HELP = (f"with --quantization fp8: layers at the start of the model kept bf16 (default "
                        f"{POST_NORM_BF16_FIRST_LAYERS} on the BERT family, else {NARROW_BF16_FIRST_LAYERS}, or "
                        f"{WIDE_BF16_FIRST_LAYERS} and the attention of the next on models at least "
                        f"{Fp8Plan.attention_output_min_hidden_size} wide; given, exactly N whole layers); more hold "
                        "the vectors closer to bf16's at less speed (docs/fp8.md measures the trade)")


FP8_WEIGHT_ROUNDINGS = ("gptq", "nearest")
FP8_WEIGHT_ROUNDING_HELP = (f"with --quantization fp8: how each weight's e4m3 value is chosen (default "
                            f"{Fp8Plan.weight_rounding}). gptq: against the layer's inputs on built-in texts, "
                            "at load (seconds, more for large models), vectors closer to bf16's; nearest: each "
                            "weight rounded on its own, no calibration (docs/fp8.md)")


FP8_POOLED_TOKENS = ("bf16", "fp8")
FP8_POOLED_TOKENS_HELP = (f"with --quantization fp8, on models that pool one token (last-token, as Qwen3-Embedding): "
                          f"that token's rows of every FP8 linear in bf16 as well (default on models at least "
                          f"{Fp8Plan.attention_output_min_hidden_size} wide) or fp8 like the rest; bf16 holds the "
                          "vectors closer to bf16's for a few percent of the speed (docs/fp8.md)")


def fp8_plan_of(quantization: str | None, bf16_layers: int | None, weight_rounding: str | None = None,
                pooled_tokens: str | None = None) -> Fp8Plan:
    """The FP8 plan --fp8-bf16-layers, --fp8-weight-rounding and --fp8-pooled-tokens ask for (the
    default where not given); ValueError where one is given without --quantization fp8, which it
    would silently not affect."""
    plan = Fp8Plan()
    keep_pooled = None if pooled_tokens is None else pooled_tokens == "bf16"
    for flag, value, field in (("--fp8-bf16-layers", bf16_layers, "bf16_first_layers"),
                               ("--fp8-weight-rounding", weight_rounding, "weight_rounding"),
                               ("--fp8-pooled-tokens", keep_pooled, "bf16_pooled_tokens")):
        if value is None:
            continue
        if quantization != "fp8":
            raise ValueError(f"argument {flag}: applies to --quantization fp8 only")
        plan = replace(plan, **{field: value})
    return plan


def _check_visible(names: tuple[str, ...]) -> None:
    if not any(name.startswith("cuda") for name in names):
        return  # torch is imported only where a GPU is named
    from rose_embed.server.processes.topology import check_devices

    try:
        check_devices(names)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _parse(value: str, kind: type, what: str):
    try:
        return kind(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {what}; got {value!r}") from None
