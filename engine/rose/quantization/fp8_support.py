"""Where --quantization fp8 can run: which models, which devices, which dtype. Each check gives
the one line that refuses, or None; the CLI asks before anything starts (this module imports
torch only to ask a GPU its compute capability), and the Engine asks again, as it can be built
without the CLI.
"""

from __future__ import annotations

# The model families whose layers write their activations as FP8 rows (engine/rose/models/bert.py,
# engine/rose/models/qwen3.py) and whose FP8 quality the tests measure.
FP8_ARCHITECTURES = {"bert": "BERT", "distilbert": "DistilBERT", "mpnet": "MPNet", "qwen3": "Qwen3"}
# FP8 tensor cores: Ada (8.9), Hopper (9.0) and newer.
MIN_CAPABILITY = (8, 9)
_NEEDS = "fp8 needs a GPU with FP8 tensor cores (compute capability 8.9 or newer: Ada, Hopper, Blackwell)"


def device_refusal(device: str) -> str | None:
    """Why FP8 cannot run on `device` ("cpu", "cuda", "cuda:N"), or None."""
    if not device.startswith("cuda"):
        return f"{_NEEDS}; the engine would run on {device}"
    import torch

    if not torch.cuda.is_available():
        return f"{_NEEDS}; torch sees no CUDA device"
    index = int(device.split(":", 1)[1]) if ":" in device else 0
    capability = tuple(torch.cuda.get_device_capability(index))
    if capability < MIN_CAPABILITY:
        name = torch.cuda.get_device_name(index)
        return f"{_NEEDS}; {device} ({name}) has compute capability {capability[0]}.{capability[1]}"
    return None


def dtype_refusal(dtype: str) -> str | None:
    """FP8 GEMMs write bf16, so the rest of the model runs bf16: auto or bfloat16."""
    if dtype in ("auto", "bfloat16"):
        return None
    return f"fp8 runs the layers around its GEMMs in bfloat16; --dtype {dtype} asks for {dtype}"


def model_refusal(architecture: str, model_name: str, kind: str) -> str | None:
    """Why FP8 does not serve this model (a family not yet supported, or a reranker or classifier:
    `kind` is ModelSpec.kind), or None."""
    if architecture not in FP8_ARCHITECTURES:
        supported = ", ".join(sorted(set(FP8_ARCHITECTURES.values())))
        return f"fp8 does not support {architecture} models yet ({model_name}); it supports {supported}"
    if kind != "embed":
        return f"fp8 serves embedders; {model_name} is a {'reranker' if kind == 'rerank' else 'classifier'}"
    return None
