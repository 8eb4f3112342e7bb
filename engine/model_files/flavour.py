"""How to run and present a checkpoint, read from its files, with the caller's overrides.

One place answers, for every model: causal or bidirectional attention, which pooling,
whether the model defines quantised (int8 / binary) output, which Matryoshka sizes it
allows, whether the tokenizer must end each text with the end token, and the default
prompt. The rules, in order of precedence (first match wins; an override is the field of
that name in engine.contract.config.ModelOverrides):

attention   override `attention`; config.json `use_bidirectional_attention: true` (EmbeddingGemma) or
            `is_causal: false`, or model_type `bidirectional_pplx_qwen3`
            (pplx-embed) -> bidirectional; other decoders (model_type qwen3, mistral,
            gemma3_text) -> causal; encoders -> bidirectional.
pooling     override `pooling`; the sentence-transformers Pooling module (engine/model_files/st_modules.py); a
            modules.json without one is refused; else last token for causal decoders
            (Qwen3-Embedding), mean otherwise (pplx-embed, BERT).
quantization override `quantization`; a sentence-transformers module of type
            `*.FlexibleQuantizer` (pplx-embed's st_quantize) or model_type
            `bidirectional_pplx_qwen3` -> "tanh": int8 = round(127 * tanh(pooled)),
            binary = sign bits. Otherwise none (float and base64 only).
matryoshka  override `matryoshka_dims` ("any" | "none" | "64,128,256"); config.json
            `matryoshka_dimensions`; else no declaration, which allows any size from 1
            to the full size (truncate and re-normalise, as OpenAI's `dimensions` does).
            The full size is the model's output size: after its Dense modules and its
            config_sentence_transformers.json `truncate_dim`.
end token   causal last-token pooling reads the end token's hidden state, so a decoder
            with last-token pooling gets the end token appended if its tokenizer does
            not append one itself (Qwen3-Embedding's later tokenizer.json does, with a
            TemplateProcessing post-processor; older snapshots do not).
prompt      override `default_prompt_name` ("" for none); config_sentence_transformers.json
            `default_prompt_name`.
refused     config.json `auto_map` pointing AutoModel (or any AutoModelFor...) at custom
            model code the engine does not know: the code, not model_type, says what is
            computed (jina-embeddings-v2 is model_type bert with ALiBi positions), so the
            engine's layers for that model_type would serve other vectors. Known: pplx-embed's
            `PPLXQwen3Model` (a bidirectional Qwen3) under its own model_type. Named
            specially: pplx-embed-context (`...ContextualModel`), which embeds each chunk in
            the context of its whole document its own way (chunks joined by separators); the
            engine's late chunking (/v1/contextualizedembeddings, engine/text/late_chunking.py)
            runs other mean-pooling models, but would give this one's vectors approximately,
            never its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from rose_embed.engine.contract.config import POOLING_MODES, ModelOverrides
from rose_embed.engine.model_files.st_modules import SentenceModules

PPLX_MODEL_TYPE = "bidirectional_pplx_qwen3"
# Custom model classes (config.json auto_map) the engine runs exactly: class name -> the
# model_type it must come with.
KNOWN_CUSTOM_MODELS = {"PPLXQwen3Model": PPLX_MODEL_TYPE}
ATTENTION_KINDS = ("causal", "bidirectional")
QUANTIZATIONS = ("none", "tanh")


class FlavourError(ValueError):
    """A checkpoint or an override asks for something this engine cannot do."""


@dataclass(frozen=True)
class Flavour:
    is_causal: bool
    pooling: str
    quantization: str | None  # None | "tanh"
    matryoshka_dims: tuple[int, ...] | None  # None: any size; () : only the full size
    append_end_token: bool
    default_prompt_name: str | None


def _refuse_custom_code(hf_config: dict) -> None:
    """Refuse a checkpoint whose auto_map names model code the engine has no exact twin of."""
    auto_map = hf_config.get("auto_map")
    if not isinstance(auto_map, dict):
        return
    model_type = hf_config.get("model_type")
    for key, ref in auto_map.items():
        if not key.startswith("AutoModel"):
            continue  # AutoConfig, AutoTokenizer: no computation the engine takes from them
        class_name = str(ref).rsplit(".", 1)[-1]
        if class_name.endswith("ContextualModel"):
            raise FlavourError(
                f"this checkpoint's model is {ref} (config.json auto_map), a contextual embedder such as "
                "pplx-embed-context: it embeds each chunk within its whole document by its own code, which "
                "rose-embed does not reproduce. Serve its independent sibling (e.g. perplexity-ai/pplx-embed-v1-0.6b) "
                "instead; /v1/contextualizedembeddings late-chunks with it"
            )
        if KNOWN_CUSTOM_MODELS.get(class_name) != model_type:
            known = ", ".join(f"{name} (model_type {kind})" for name, kind in KNOWN_CUSTOM_MODELS.items())
            raise FlavourError(
                f"config.json auto_map points {key} at custom model code, {ref}; what that code computes is not "
                f"what rose-embed's own {model_type!r} layers compute (jina-embeddings-v2, say, is a 'bert' with "
                f"ALiBi positions), so the checkpoint is refused rather than served approximately. Custom code "
                f"rose-embed runs exactly: {known}"
            )


def _is_causal(hf_config: dict, is_decoder: bool, override: str | None) -> bool:
    if override is not None:
        if override not in ATTENTION_KINDS:
            raise FlavourError(f"attention must be one of {', '.join(ATTENTION_KINDS)}; got {override!r}")
        return override == "causal"
    if hf_config.get("use_bidirectional_attention") is True or hf_config.get("is_causal") is False:
        return False
    if hf_config.get("model_type") == PPLX_MODEL_TYPE:
        return False
    return is_decoder


def _quantization(hf_config: dict, modules: SentenceModules, override: str | None) -> str | None:
    if override is not None:
        if override not in QUANTIZATIONS:
            raise FlavourError(f"embedding quantization must be one of {', '.join(QUANTIZATIONS)}; got {override!r}")
        return None if override == "none" else override
    if modules.quantizer:
        return "tanh"
    return "tanh" if hf_config.get("model_type") == PPLX_MODEL_TYPE else None


def parse_matryoshka_dims(text: str, full_size: int) -> tuple[int, ...] | None:
    """"any" -> None, "none" -> (), "64,128" -> (64, 128); sizes must lie in 1..full_size."""
    text = text.strip().lower()
    if text == "any":
        return None
    if text in ("none", ""):
        return ()
    try:
        dims = tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    except ValueError as exc:
        raise FlavourError(f"Matryoshka sizes must be 'any', 'none' or a comma list of sizes; got {text!r}") from exc
    if not dims or dims[0] < 1 or dims[-1] > full_size:
        raise FlavourError(f"Matryoshka sizes must lie between 1 and {full_size}; got {text!r}")
    return dims


def _matryoshka(hf_config: dict, full_size: int, override: str | None) -> tuple[int, ...] | None:
    if override is not None:
        return parse_matryoshka_dims(override, full_size)
    declared = hf_config.get("matryoshka_dimensions")
    if isinstance(declared, list) and declared:
        return parse_matryoshka_dims(",".join(str(d) for d in declared), full_size)
    return None


def read_flavour(
    hf_config: dict, modules: SentenceModules, st_cfg: dict, prompts: dict,
    embedding_dim: int, is_decoder: bool, overrides: ModelOverrides,
) -> Flavour:
    """Apply the rules of this module's docstring to one checkpoint's files."""
    _refuse_custom_code(hf_config)
    is_causal = _is_causal(hf_config, is_decoder, overrides.attention)
    if overrides.pooling is not None and overrides.pooling not in POOLING_MODES:
        raise FlavourError(f"pooling must be one of {', '.join(POOLING_MODES)}; got {overrides.pooling!r}")
    pooling = overrides.pooling or modules.pooling or ("last" if is_decoder and is_causal else "mean")
    default_prompt = st_cfg.get("default_prompt_name")
    if overrides.default_prompt_name is not None:
        default_prompt = overrides.default_prompt_name or None
    if default_prompt is not None and default_prompt not in prompts:
        raise FlavourError(
            f"default prompt {default_prompt!r} is not among the model's prompts ({', '.join(prompts) or 'none'})"
        )
    return Flavour(
        is_causal=is_causal,
        pooling=pooling,
        quantization=_quantization(hf_config, modules, overrides.quantization),
        matryoshka_dims=_matryoshka(hf_config, embedding_dim, overrides.matryoshka_dims),
        append_end_token=is_decoder and "last" in pooling.split("+"),
        default_prompt_name=default_prompt,
    )
