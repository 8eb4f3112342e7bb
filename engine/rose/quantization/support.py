"""--quantization's values and where each can run: the one-line refusals of fp8
(engine/rose/quantization/fp8_support.py) and int8 (engine/rose/quantization/int8_support.py), asked by name."""

from __future__ import annotations

from rose_embed.engine.rose.quantization import fp8_support, int8_support

QUANTIZATIONS = ("fp8", "int8")
_SUPPORT = {"fp8": fp8_support, "int8": int8_support}


def _support(quantization: str):
    if quantization not in _SUPPORT:
        raise ValueError(f"quantization must be one of {', '.join(QUANTIZATIONS)}; got {quantization!r}")
    return _SUPPORT[quantization]


def device_refusal(quantization: str, device: str) -> str | None:
    """Why `quantization` cannot run on `device` ("cpu", "cuda", "cuda:N"), or None."""
    return _support(quantization).device_refusal(device)


def dtype_refusal(quantization: str, dtype: str) -> str | None:
    """Why `quantization` cannot run beside --dtype `dtype`, or None."""
    return _support(quantization).dtype_refusal(dtype)


def model_refusal(quantization: str, architecture: str, model_name: str, kind: str) -> str | None:
    """Why `quantization` does not serve this model (`kind`: ModelSpec.kind), or None."""
    return _support(quantization).model_refusal(architecture, model_name, kind)
