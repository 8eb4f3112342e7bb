"""Read a sentence-transformers `modules.json` by what each module is, and refuse what cannot run.

A module is known by its class name, whatever package path the writing version used:
2.x-5.x write `sentence_transformers.models.Pooling`, 6.x writes
`sentence_transformers.sentence_transformer.modules.pooling.Pooling` and
`sentence_transformers.base.modules.dense.Dense`. Only classes of the `sentence_transformers`
package are taken by name (a custom class may do anything); the one custom class known is
pplx-embed's `*.FlexibleQuantizer`, which marks a model with int8 / binary output.

The pipeline the engine can run, in this order:

  Transformer          first, saved in the model folder; feature extraction (token embeddings)
  Pooling              cls, mean, lasttoken, max, mean_sqrt_len_tokens, weightedmean (several
                       modes are concatenated, in the order sentence-transformers uses)
  Dense / LayerNorm /  on the pooled vector, in checkpoint order; Dropout is the identity at
  Normalize / Dropout  inference
  FlexibleQuantizer    last

Anything else (WordEmbeddings, CNN, LSTM, StaticEmbedding, Router / Asym, WordWeights,
WeightedLayerPooling, a custom class), or a known module out of this order, raises ModuleError
naming the module's folder and its type.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rose_embed.engine.model_files.json_files import read_json

# sentence-transformers' pooling mode names -> ours (engine/rose/layers/pooling.py).
_POOLING_MODES = {"cls": "cls", "mean": "mean", "lasttoken": "last", "max": "max",
                  "mean_sqrt_len_tokens": "mean_sqrt_len", "weightedmean": "weighted_mean"}
# 2.x-5.x save one boolean per mode; concatenation follows this order (as 6.x converts them).
_LEGACY_POOLING_KEYS = (("pooling_mode_cls_token", "cls"), ("pooling_mode_max_tokens", "max"),
                        ("pooling_mode_mean_tokens", "mean"), ("pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len_tokens"),
                        ("pooling_mode_weightedmean_tokens", "weightedmean"), ("pooling_mode_lasttoken", "lasttoken"))
# The Transformer module's settings file; before 2.x some models were saved with one named after the architecture.
_TRANSFORMER_CONFIGS = ("sentence_bert_config.json", "sentence_roberta_config.json", "sentence_distilbert_config.json",
                        "sentence_camembert_config.json", "sentence_albert_config.json",
                        "sentence_xlm-roberta_config.json", "sentence_xlnet_config.json")
# Dense activations: sentence-transformers instantiates any `torch.*` nn.Module class with no
# arguments. These are element-wise and run as the very same torch module here.
ACTIVATIONS = ("Identity", "Tanh", "ReLU", "GELU", "Sigmoid", "SiLU", "LeakyReLU", "ELU", "SELU", "CELU",
               "Softplus", "Softsign", "Mish", "Hardtanh", "ReLU6", "Hardswish", "Hardsigmoid", "Tanhshrink",
               "LogSigmoid")
# The Transformer module's processing_kwargs entries that reach a text's tokenization (the others,
# audio, image and video, apply to inputs this server never receives).
_TEXT_PROCESSING_KEYS = ("common", "text", "chat_template")
# The Transformer module's own lengths for queries and documents (and a query's padding to one).
_PER_TASK_KEYS = ("query_length", "document_length", "query_expansion")
_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
_SENTENCE_EMBEDDING = "sentence_embedding"


class ModuleError(ValueError):
    """A module of modules.json that the engine cannot run exactly."""


@dataclass(frozen=True)
class Dense:
    """y = activation(x @ W.T + b) (+ x, or + x @ R.T when use_residual changes the size)."""

    weights: Path  # the module's model.safetensors or pytorch_model.bin: linear.weight/bias, residual.weight
    in_features: int
    out_features: int
    bias: bool
    activation: str  # a torch.nn class name from ACTIVATIONS
    use_residual: bool = False


@dataclass(frozen=True)
class LayerNorm:
    weights: Path  # norm.weight, norm.bias
    dim: int


@dataclass(frozen=True)
class Normalize:
    """L2 normalisation of the vector at this point of the pipeline."""


HeadStep = Dense | LayerNorm | Normalize


@dataclass(frozen=True)
class SentenceModules:
    """What a checkpoint's modules.json asks for (all defaults without one)."""

    pooling: str | None = None  # ours, "+"-joined when several modes are concatenated: "cls", "cls+mean"
    head: tuple[HeadStep, ...] = ()  # after pooling, in order
    quantizer: bool = False
    max_seq_length: int | None = None  # the Transformer module's own limit, where it states one
    lowercase: bool = False  # the Transformer module lowercases texts before tokenizing
    truncate_dim: int | None = None  # config_sentence_transformers.json: vectors cut to this size


def _class_name(type_ref: str) -> str | None:
    """The class name for a sentence-transformers class, whatever its package path; None for others."""
    return type_ref.rsplit(".", 1)[-1] if type_ref.startswith("sentence_transformers.") else None


class ModuleEntry:
    """One entry of modules.json, with what error messages need to name it."""

    def __init__(self, model_dir: Path, entry: dict, index: int):
        self.type = str(entry.get("type", ""))
        self.path = str(entry.get("path", ""))
        self.name = str(entry.get("name", entry.get("idx", index)))
        self.folder = model_dir / self.path
        self.cls = _class_name(self.type)

    def label(self) -> str:
        where = f"folder {self.path!r}" if self.path else "the model folder"
        return f"sentence-transformers module {self.name!r} ({where}) of type {self.type!r}"

    def error(self, why: str) -> ModuleError:
        return ModuleError(f"{self.label()}: {why}")

    def config(self, filename: str = "config.json") -> dict:
        cfg = read_json(self.folder / filename)
        if cfg is None:
            return {}
        if not isinstance(cfg, dict):
            raise self.error(f"{filename} is not a JSON object")
        return cfg

    def weights(self) -> Path:
        for name in _WEIGHT_FILES:
            if (self.folder / name).is_file():
                return self.folder / name
        raise self.error(f"no weights ({' or '.join(_WEIGHT_FILES)}) in its folder")


# The Transformer module's task -> the output of the Hugging Face model it reads (feature extraction:
# the token states; fill-mask, a SparseEncoder's MLMTransformer: the MLM logits).
TRANSFORMER_OUTPUTS = {"feature-extraction": "last_hidden_state", "fill-mask": "logits"}


def transformer_settings(module: ModuleEntry, task: str = "feature-extraction",
                         in_folder: bool = False) -> tuple[int | None, bool]:
    """(max_seq_length, do_lower_case) from the Transformer module's settings, which must ask for `task`.
    `in_folder`: the module is a Router's, in its route's folder (engine/model_files/sparse_router.py)."""
    if module.path and not in_folder:
        raise module.error("its model is saved in a subfolder (a layout from before sentence-transformers 2.0); "
                           "re-save the model with a current sentence-transformers")
    cfg = next((c for name in _TRANSFORMER_CONFIGS if (c := module.config(name))), {})
    saved_task = cfg.get("transformer_task", task)
    if saved_task != task:
        raise module.error(f"transformer_task {saved_task!r} is not supported here (only {task})")
    modalities = cfg.get("modality_config") or {}
    text = modalities.get("text", {})
    output = TRANSFORMER_OUTPUTS[task]
    if text.get("method_output_name", output) != output:
        raise module.error(f"text output {text['method_output_name']!r} is not supported (only {output})")
    if "message" in modalities:
        # sentence-transformers then renders every text through the tokenizer's chat template.
        raise module.error("the message modality (texts rendered through a chat template) is not supported")
    processing = cfg.get("processing_kwargs") or {}
    if changed := sorted(key for key in _TEXT_PROCESSING_KEYS if processing.get(key)):
        # Tokenizer arguments (max_length, truncation, a chat template's) that change the tokens
        # sentence-transformers feeds the model; the engine tokenizes by the tokenizer's files alone.
        raise module.error(f"processing_kwargs for {', '.join(changed)} are not supported (they change how texts "
                           "are tokenized)")
    if per_task := sorted(key for key in _PER_TASK_KEYS if cfg.get(key) is not None):
        # sentence-transformers' encode_query / encode_document cut or pad their texts by these.
        raise module.error(f"{', '.join(per_task)} are not supported (queries or documents would be tokenized to "
                           "their own lengths)")
    max_len = cfg.get("max_seq_length")
    return (int(max_len) if max_len else None), bool(cfg.get("do_lower_case", False))


def _pooling(module: ModuleEntry, has_prompts: bool) -> str:
    cfg = module.config()
    if "pooling_mode" in cfg:  # 6.x: one name or a list
        modes = cfg["pooling_mode"]
        modes = [modes] if isinstance(modes, str) else list(modes)
    else:
        modes = [mode for key, mode in _LEGACY_POOLING_KEYS if cfg.get(key)] or ["mean"]
    unknown = [m for m in modes if m not in _POOLING_MODES]
    if unknown:
        raise module.error(f"pooling mode {unknown[0]!r} is not supported ({', '.join(_POOLING_MODES)} are)")
    if cfg.get("include_prompt", True) is False and has_prompts:
        # The engine sees one token stream per text, prompt included; pooling without the
        # prompt's tokens would need their count per text.
        raise module.error("include_prompt: false with prompts is not supported (pooling would have to skip "
                           "each prompt's tokens)")
    return "+".join(_POOLING_MODES[m] for m in modes)


def _check_sentence_embedding(module: ModuleEntry, cfg: dict) -> None:
    for key in ("module_input_name", "module_output_name"):
        if cfg.get(key, _SENTENCE_EMBEDDING) not in (None, _SENTENCE_EMBEDDING):
            raise module.error(f"{key} {cfg[key]!r} is not supported (only {_SENTENCE_EMBEDDING!r})")


def _activation(module: ModuleEntry, path: str | None) -> str:
    if path is None:
        return "Tanh"  # Dense's default, which sentence-transformers uses when the key is absent
    name = path.rsplit(".", 1)[-1]
    if not path.startswith("torch.") or name not in ACTIVATIONS:
        raise module.error(f"activation_function {path!r} is not supported ({', '.join(ACTIVATIONS)} are)")
    return name


def dense_module(module: ModuleEntry, in_dim: int) -> Dense:
    cfg = module.config()
    _check_sentence_embedding(module, cfg)
    try:
        dense = Dense(module.weights(), int(cfg["in_features"]), int(cfg["out_features"]), bool(cfg.get("bias", True)),
                      _activation(module, cfg.get("activation_function")), bool(cfg.get("use_residual", False)))
    except KeyError as exc:
        raise module.error(f"config.json lacks {exc.args[0]!r}") from None
    if dense.in_features != in_dim:
        raise module.error(f"in_features {dense.in_features} does not match the {in_dim}-wide vector it receives")
    return dense


def _layer_norm(module: ModuleEntry, in_dim: int) -> LayerNorm:
    dim = int(module.config().get("dimension", in_dim))
    if dim != in_dim:
        raise module.error(f"dimension {dim} does not match the {in_dim}-wide vector it receives")
    return LayerNorm(module.weights(), dim)


def read_modules(model_dir: Path, hidden_size: int, st_config: dict) -> SentenceModules:
    """Read modules.json (and truncate_dim from config_sentence_transformers.json); raise ModuleError
    (or, for a file that is not valid JSON, json_files' ModelLoadError naming it)."""
    entries = read_json(model_dir / "modules.json")
    truncate_dim = st_config.get("truncate_dim")
    if entries is None:
        return SentenceModules(truncate_dim=_truncate_dim(truncate_dim, hidden_size))
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ModuleError("modules.json is not a list of modules")
    has_prompts = any((st_config.get("prompts") or {}).values())
    modules = [ModuleEntry(model_dir, entry, i) for i, entry in enumerate(entries)]
    pooling, head, quantizer = None, [], False
    max_seq_length, lowercase, dim = None, False, hidden_size
    for i, module in enumerate(modules):
        if quantizer:
            raise module.error("comes after the FlexibleQuantizer module, which must be last")
        if module.type.endswith("FlexibleQuantizer"):
            if pooling is None:
                raise module.error("comes before the Pooling module")
            quantizer = True
        elif module.cls == "Transformer":
            if i != 0:
                raise module.error("the Transformer module must come first")
            max_seq_length, lowercase = transformer_settings(module)
        elif i == 0:
            raise module.error("the first module must be a Transformer (this one is not supported as the model's input)")
        elif module.cls == "Pooling":
            if pooling is not None:
                raise module.error("a second Pooling module is not supported")
            pooling = _pooling(module, has_prompts)
            dim = hidden_size * len(pooling.split("+"))
        elif module.cls in ("Dense", "LayerNorm", "Normalize", "Dropout"):
            if pooling is None:
                raise module.error("comes before the Pooling module (on token embeddings), which is not supported")
            if module.cls == "Dense":
                head.append(dense_module(module, dim))
                dim = head[-1].out_features
            elif module.cls == "LayerNorm":
                head.append(_layer_norm(module, dim))
            elif module.cls == "Normalize":
                _check_sentence_embedding(module, module.config())
                head.append(Normalize())
            # Dropout is the identity at inference.
        else:
            why = "a custom module" if module.cls is None else f"the module {module.cls} is not supported"
            raise module.error(f"{why}; supported: Transformer, Pooling, Dense, LayerNorm, Normalize, Dropout")
    if modules and pooling is None:
        raise ModuleError("modules.json has no Pooling module, so sentence-transformers would give no sentence "
                          "embedding")
    return SentenceModules(pooling=pooling, head=tuple(head), quantizer=quantizer,
                           max_seq_length=max_seq_length, lowercase=lowercase,
                           truncate_dim=_truncate_dim(truncate_dim, dim))


def output_dim(pooling: str, head: tuple[HeadStep, ...], hidden_size: int) -> int:
    """The size of the vectors the pooling and head steps produce (before any truncation)."""
    dim = hidden_size * len(pooling.split("+"))
    for step in head:
        if isinstance(step, Dense):
            if step.in_features != dim:
                raise ModuleError(f"a Dense module takes {step.in_features}-wide vectors, but gets {dim}-wide ones "
                                  f"from {pooling!r} pooling")
            dim = step.out_features
    return dim


def _truncate_dim(value, dim: int) -> int | None:
    if value is None or int(value) >= dim:
        return None  # sentence-transformers keeps the full vector when truncate_dim is not smaller
    if int(value) < 1:
        raise ModuleError(f"config_sentence_transformers.json truncate_dim {value!r} must be at least 1")
    return int(value)
