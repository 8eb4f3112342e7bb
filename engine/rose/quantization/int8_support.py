"""Where --quantization int8 can run: which models, which devices, which CPUs, which dtype. Each
check gives the one line that refuses, or None; the CLI asks before anything starts, and the
Engine asks again, as it can be built without the CLI (docs/cpu-int8.md).
"""

from __future__ import annotations

# Every architecture the engine serves: their linear layers are nn.Linear modules under the
# names engine/rose/quantization/int8_plan.py replaces, and tests/unit/test_int8.py holds each to its reference.
INT8_ARCHITECTURES = {"bert": "BERT", "distilbert": "DistilBERT", "gemma3": "Gemma3", "mistral": "Mistral",
                      "modernbert": "ModernBERT", "mpnet": "MPNet", "qwen3": "Qwen3"}
_NEEDS = "int8 runs on a CPU with AVX512-VNNI or AMX-INT8"


def device_refusal(device: str) -> str | None:
    """Why int8 cannot run on `device` ("cpu", "cuda", "cuda:N"), or None: the CPU only, and only
    one whose int8 dot products it was measured on (read from the CPU, never assumed)."""
    if device != "cpu":
        return f"{_NEEDS} (the GPU's quantization is fp8); the engine would run on {device}"
    import platform

    from rose_embed.engine.rose.cpu_features import int8_dot_products

    if int8_dot_products() is None:
        return f"{_NEEDS}; this CPU ({platform.machine()}) has neither, and int8 was not measured without them"
    return None


def dtype_refusal(dtype: str) -> str | None:
    """int8 GEMMs write the dtype the rest of the model runs in: bf16 or float32, not float16
    (the CPU has no float16 arithmetic of its own)."""
    if dtype in ("auto", "bfloat16", "float32"):
        return None
    return f"int8 runs the layers around its GEMMs in bfloat16 or float32; --dtype {dtype} asks for {dtype}"


def model_refusal(architecture: str, model_name: str, kind: str) -> str | None:
    """Why int8 does not serve this model (an unknown family, or a reranker or classifier: `kind`
    is ModelSpec.kind), or None."""
    if architecture not in INT8_ARCHITECTURES:
        supported = ", ".join(sorted(INT8_ARCHITECTURES.values()))
        return f"int8 does not support {architecture} models ({model_name}); it supports {supported}"
    if kind != "embed":
        return f"int8 serves embedders; {model_name} is a {'reranker' if kind == 'rerank' else 'classifier'}"
    return None
