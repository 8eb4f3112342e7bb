"""Find a model, read what it is (config.json + sentence-transformers files), load its weights.

A model is a local directory, a Hugging Face hub id (resolved through the local hub cache,
downloaded when the network allows), or None for the embedded default model, which its hub id
also names (engine/model_files/embedded_model.py).
"""

from __future__ import annotations

import pickle
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rose_embed.engine.model_files.architecture_support import config_refusal
from rose_embed.engine.model_files.clip import ClipError, ClipModel, clip_model_dir, is_clip, read_clip
from rose_embed.engine.model_files.siglip import SIGLIP2_NAFLEX_REFUSAL, is_siglip, read_siglip, text_tower
from rose_embed.engine.model_files.bge_m3 import (
    COLBERT_FILE, SPARSE_FILE, BgeM3Error, BgeM3Model, is_bge_m3, read_bge_m3,
)
from rose_embed.engine.contract.config import ModelOverrides
from rose_embed.engine.contract import m3_rows
from rose_embed.engine.contract.sparse_rows import row_width
from rose_embed.engine.model_files.embedded_model import (
    DEFAULT_MODEL_NAME, embedded_model_dir, is_embedded_hub_id, is_embedded_model_dir,
)
from rose_embed.engine.model_files.flavour import PPLX_MODEL_TYPE, FlavourError, parse_matryoshka_dims, read_flavour
from rose_embed.engine.model_files.json_files import read_json, read_json_object
from rose_embed.engine.model_files.load_error import ModelLoadError
from rose_embed.engine.model_files.colbert import ColbertError, ColbertModel, is_colbert, read_colbert
from rose_embed.engine.model_files.checkpoint_kind import checkpoint_kind
from rose_embed.engine.model_files.classifier import Classifier, read_classifier
from rose_embed.engine.model_files.classifier_heads import HeadError
from rose_embed.engine.model_files.reranker import QWEN3_MAX_LEN, Reranker, read_reranker
from rose_embed.engine.model_files.sparse import SparseError, SparseModel, is_sparse, read_sparse
from rose_embed.engine.model_files.sparse_router import RouterError, routed_model_dir
from rose_embed.engine.model_files.st_modules import HeadStep, ModuleError, SentenceModules, output_dim, read_modules

if TYPE_CHECKING:  # reading what a model is needs no torch (a front end, the supervisor): only its weights do
    import torch

# config.json model_type -> the architecture that runs it (a key of engine.rose.models.MODEL_CLASSES).
ARCHITECTURES = {
    "bert": "bert", "roberta": "bert", "xlm-roberta": "bert", "camembert": "bert",
    "distilbert": "distilbert",
    "mpnet": "mpnet",
    "modernbert": "modernbert",
    "qwen3": "qwen3", PPLX_MODEL_TYPE: "qwen3",
    "mistral": "mistral",
    "gemma3_text": "gemma3",
    "clip": "clip",
    "siglip": "siglip",
}
DECODER_ARCHITECTURES = {"qwen3", "mistral", "gemma3"}
# Encoders whose learned positions start after the padding index (which costs that many slots).
_POSITIONS_AFTER_PADDING = {"roberta", "xlm-roberta", "camembert", "mpnet"}
# Architectures whose positions are a learned table of max_position_embeddings rows (the others rotate).
_LEARNED_POSITIONS = {"bert", "distilbert", "mpnet"}


# What a hub download fetches: configs, tokenizer files and safetensors weights (not the
# ONNX, OpenVINO or pickled copies many repositories carry as well).
# "[0-9]*_*/*": the sentence-transformers module folders (1_Pooling, 2_Dense with its weights,
# which 2.x saved as pytorch_model.bin), and BGE-M3's two linears.
_HUB_FILES = ["*.json", "*.safetensors", "*.txt", "*.model", "[0-9]*_*/*", COLBERT_FILE, SPARSE_FILE]


@dataclass(frozen=True)
class ModelSpec:
    """Everything the engine and the server need to know about a model, read once."""

    path: Path
    name: str  # what /v1/models lists unless the server is given another name
    architecture: str  # key into engine.rose.models.MODEL_CLASSES
    hf_config: dict
    pooling: str  # engine/rose/layers/pooling.py's modes, "+"-joined where concatenated: "cls", "mean", "cls+mean"
    normalize: bool  # the final L2 normalisation (the sentence-transformers Normalize module is a head step)
    max_seq_len: int
    hidden_size: int  # the transformer's width
    embedding_dim: int  # the size of the vectors handed out (after Dense modules and truncate_dim)
    is_causal: bool
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None
    quantization: str | None = None  # "tanh" where the model defines int8 / binary output
    matryoshka_dims: tuple[int, ...] | None = None  # None: any size 1..embedding_dim
    append_end_token: bool = False  # the tokenizer must end each text with the end token
    head: tuple[HeadStep, ...] = ()  # sentence-transformers modules after pooling, in order
    truncate_dim: int | None = None  # vectors cut to this size before the final normalisation
    lowercase: bool = False  # texts are lowercased before tokenizing (the Transformer module's do_lower_case)
    # Set for a reranker: a (query, document) pair in, [score, raw logit] out (embedding_dim 2).
    reranker: Reranker | None = None
    # Set for a classifier: a text or a pair in, [probabilities, raw logits] out (embedding_dim 2 * labels).
    classifier: Classifier | None = None
    # Set for a sparse encoder (SPLADE, an embedder of kind "embed"): a text in, its (index, value) pairs
    # out, packed into rows of embedding_dim floats (engine/contract/sparse_rows.py).
    sparse: SparseModel | None = None
    # Set for a multi-vector (ColBERT) model, an embedder of kind "embed": a query or a document in,
    # one vector of embedding_dim per kept token out, each token a pooling segment (engine/text/colbert_tokens.py).
    colbert: ColbertModel | None = None
    # Set for BGE-M3, an embedder of kind "embed": a text in, rows of [dense or colbert vector | lexical
    # weight] out, one per text or one per token as the request asks (engine/contract/m3_rows.py).
    m3: BgeM3Model | None = None
    # Set for a CLIP dual encoder, an embedder of kind "embed": a text or an image in, one vector of the
    # space both share out (engine/model_files/clip.py); the text tower is the model's packed-stream forward.
    clip: ClipModel | None = None

    @property
    def is_reranker(self) -> bool:
        return self.reranker is not None

    @property
    def kind(self) -> str:
        """What it serves: "embed", "rerank" or "classify" (engine/model_files/checkpoint_kind.py)."""
        return "rerank" if self.reranker is not None else "classify" if self.classifier is not None else "embed"


def resolve_model_dir(model: str | None, revision: str | None = None) -> tuple[Path, str]:
    """Return (directory, display name) for a directory, a hub id (at `revision`: a branch, tag
    or commit; None: the default branch) or None (the default). The default model's hub id with
    no revision is its embedded copy: no download, whatever the network allows."""
    if revision is not None and (model is None or Path(model).expanduser().exists()):
        raise ModelLoadError(f"revision {revision!r} applies to hub ids; {model or 'the default model'} is local")
    if model is None:
        return embedded_model_dir(), DEFAULT_MODEL_NAME
    path = Path(model).expanduser()
    if path.is_dir():
        # The package's folder is served under the name clients know the default model by.
        return path.resolve(), DEFAULT_MODEL_NAME if is_embedded_model_dir(path) else path.resolve().name
    if path.exists():
        raise ModelLoadError(f"model {model!r} is a file; give the model's directory")
    if model.count("/") > 1 or model.startswith((".", "/", "~")):
        raise ModelLoadError(f"model {model!r}: no such directory")
    if is_embedded_hub_id(model, revision):
        return embedded_model_dir(), model
    try:
        from huggingface_hub import snapshot_download

        local = Path(snapshot_download(model, revision=revision, allow_patterns=_HUB_FILES))
        if not any(local.glob("*.safetensors")):  # an older checkpoint: its weights are pickled
            local = Path(snapshot_download(model, revision=revision, allow_patterns=["pytorch_model*.bin"]))
    except Exception as exc:
        at = f" at revision {revision!r}" if revision else ""
        raise ModelLoadError(
            f"model {model!r} is neither a local directory nor a hub id that could be "
            f"fetched{at} or found in the hub cache ({type(exc).__name__})"
        ) from exc
    return local, model


def _position_limit(hf_config: dict) -> int:
    limit = hf_config.get("max_position_embeddings") or 512
    if hf_config.get("model_type") in _POSITIONS_AFTER_PADDING:
        # RoBERTa's and MPNet's positions start after the padding index (1), which costs two slots.
        limit -= (hf_config.get("pad_token_id") or 1) + 1
    return int(limit)


def _max_seq_len(model_dir: Path, hf_config: dict, modules: SentenceModules, architecture: str) -> int:
    if modules.max_seq_length:
        if architecture in _LEARNED_POSITIONS:
            # A max_seq_length past the position table would index beyond it (transformers fails there too).
            return min(modules.max_seq_length, _position_limit(hf_config))
        return modules.max_seq_length
    limits = [_position_limit(hf_config)]
    tok_cfg = read_json_object(model_dir / "tokenizer_config.json") or {}
    if isinstance(tok_cfg.get("model_max_length"), int) and tok_cfg["model_max_length"] < 10**9:
        limits.append(tok_cfg["model_max_length"])
    return int(min(limits))


def load_spec(model: str | None, max_seq_len: int | None = None, overrides: ModelOverrides | None = None,
              revision: str | None = None) -> ModelSpec:
    """Read a model's description (no weights); engine/model_files/flavour.py says how each choice is made."""
    root, name = resolve_model_dir(model, revision)
    try:  # an inference-free sparse encoder keeps its model in its document route's folder
        model_dir = routed_model_dir(root) or root
    except RouterError as exc:
        raise ModelLoadError(f"{root}: {exc}") from exc
    try:  # sentence-transformers' packaging of a CLIP model may keep it in a module's folder
        model_dir = clip_model_dir(root) or model_dir
    except ClipError as exc:
        raise ModelLoadError(f"{root}: {exc}") from exc
    hf_config = read_json_object(model_dir / "config.json")
    if hf_config is None:
        raise ModelLoadError(f"{model_dir} has no config.json")
    if hf_config.get("model_type") == "siglip2":
        raise ModelLoadError(f"{model_dir}: {SIGLIP2_NAFLEX_REFUSAL}")
    if is_siglip(hf_config):  # before the tokenizer.json check: SigLIP's original tokenizer has spiece.model instead
        return _siglip_spec(model_dir, name, hf_config, max_seq_len, overrides or ModelOverrides())
    if not (model_dir / "tokenizer.json").is_file():
        raise ModelLoadError(f"{model_dir} has no tokenizer.json (a fast tokenizer is required)")
    model_type = hf_config.get("model_type", "")
    if model_type not in ARCHITECTURES:
        raise ModelLoadError(f"model_type {model_type!r} is not supported (supported: {', '.join(sorted(ARCHITECTURES))})")
    architecture = ARCHITECTURES[model_type]
    if refusal := config_refusal(architecture, hf_config):
        raise ModelLoadError(refusal)
    if is_clip(hf_config):
        return _clip_spec(model_dir, name, hf_config, max_seq_len, overrides or ModelOverrides())
    # DistilBERT's config calls the hidden size `dim`.
    hidden_size = int(hf_config.get("hidden_size") or hf_config.get("dim") or 0)

    st_cfg = read_json_object(root / "config_sentence_transformers.json") or {}
    overrides = overrides or ModelOverrides()
    try:
        kind = checkpoint_kind(hf_config, st_cfg, overrides.kind)
        if kind != "embed":
            return _scoring_spec(model_dir, name, architecture, hf_config, st_cfg, hidden_size, max_seq_len, kind)
    except HeadError as exc:
        raise ModelLoadError(f"{model_dir}: {exc}") from exc
    try:
        if overrides.kind is None and is_colbert(st_cfg):
            return _colbert_spec(model_dir, name, architecture, hf_config, st_cfg, hidden_size)
    except (ColbertError, ModuleError) as exc:
        raise ModelLoadError(f"{model_dir}: {exc}") from exc
    try:
        if overrides.kind is None and is_sparse(root, st_cfg):
            return _sparse_spec(root, model_dir, name, architecture, hf_config, st_cfg, hidden_size, max_seq_len,
                                overrides)
    except (SparseError, RouterError, ModuleError) as exc:
        raise ModelLoadError(f"{root}: {exc}") from exc
    try:
        if overrides.kind is None and is_bge_m3(model_dir):
            return _bge_m3_spec(model_dir, name, architecture, hf_config, st_cfg, hidden_size, max_seq_len)
    except (BgeM3Error, ModuleError) as exc:
        raise ModelLoadError(f"{model_dir}: {exc}") from exc
    prompts = dict(st_cfg.get("prompts") or {})
    try:
        modules = read_modules(model_dir, hidden_size, st_cfg)
        pooling = overrides.pooling or modules.pooling
        full_dim = output_dim(pooling, modules.head, hidden_size) if pooling else hidden_size
        embedding_dim = modules.truncate_dim or full_dim
        flavour = read_flavour(hf_config, modules, st_cfg, prompts, embedding_dim, architecture in DECODER_ARCHITECTURES, overrides)
    except FlavourError as exc:
        raise ModelLoadError(str(exc)) from exc
    except ModuleError as exc:
        raise ModelLoadError(f"{model_dir}: {exc}") from exc
    model_limit = _max_seq_len(model_dir, hf_config, modules, architecture)
    return ModelSpec(
        path=model_dir,
        name=name,
        architecture=architecture,
        hf_config=hf_config,
        pooling=flavour.pooling,
        # OpenAI's vectors are unit length, and clients compute cosine as a dot product.
        # A quantising model hands out its raw pooled vector instead: int8 = round(127 *
        # tanh(pooled)) depends on its scale; compat/encoding.py normalises float output.
        normalize=flavour.quantization is None,
        max_seq_len=min(max_seq_len, model_limit) if max_seq_len else model_limit,
        hidden_size=hidden_size,
        embedding_dim=embedding_dim,
        is_causal=flavour.is_causal,
        prompts=prompts,
        default_prompt_name=flavour.default_prompt_name,
        quantization=flavour.quantization,
        matryoshka_dims=flavour.matryoshka_dims,
        append_end_token=flavour.append_end_token,
        head=modules.head,
        truncate_dim=modules.truncate_dim,
        lowercase=modules.lowercase,
    )


def _scoring_spec(model_dir: Path, name: str, architecture: str, hf_config: dict, st_cfg: dict, hidden_size: int,
                  max_seq_len: int | None, kind: str) -> ModelSpec:
    """A reranker's or a classifier's description (engine/model_files/checkpoint_kind.py says which
    checkpoints are which): its head's numbers, not a vector, come out of each sequence."""

    def vocab() -> dict[str, int]:
        from rose_embed.engine.model_files.tokenizer_file import read_tokenizer

        return read_tokenizer(model_dir / "tokenizer.json").get_vocab(with_added_tokens=True)

    reranker = read_reranker(model_dir, hf_config, st_cfg, vocab) if kind == "rerank" else None
    classifier = read_classifier(hf_config) if kind == "classify" else None
    st_transformer = read_json_object(model_dir / "sentence_bert_config.json") or {}
    model_limit = _max_seq_len(model_dir, hf_config, SentenceModules(max_seq_length=st_transformer.get("max_seq_length")),
                               architecture)
    if reranker is not None and reranker.is_template:
        model_limit = min(model_limit, QWEN3_MAX_LEN)
    return ModelSpec(
        path=model_dir, name=name, architecture=architecture, hf_config=hf_config,
        pooling=(reranker or classifier).pooling, normalize=False,
        max_seq_len=min(max_seq_len, model_limit) if max_seq_len else model_limit, hidden_size=hidden_size,
        embedding_dim=2 if classifier is None else 2 * classifier.num_labels,
        is_causal=architecture in DECODER_ARCHITECTURES, matryoshka_dims=(), reranker=reranker, classifier=classifier,
    )


def _colbert_spec(model_dir: Path, name: str, architecture: str, hf_config: dict, st_cfg: dict,
                  hidden_size: int) -> ModelSpec:
    """A PyLate ColBERT model's description (engine/model_files/colbert.py). Its lengths are PyLate's
    query_length and document_length, whatever --max-seq-len says: they are part of what the vectors are."""
    colbert, lowercase = read_colbert(model_dir, st_cfg, hidden_size, _position_limit(hf_config))
    return ModelSpec(
        path=model_dir, name=name, architecture=architecture, hf_config=hf_config,
        pooling="cls",  # of a one-token segment: the token's own state
        normalize=True, max_seq_len=max(colbert.query_length, colbert.document_length), hidden_size=hidden_size,
        embedding_dim=colbert.dense[-1].out_features, is_causal=architecture in DECODER_ARCHITECTURES,
        matryoshka_dims=(), head=colbert.dense, lowercase=lowercase, colbert=colbert,
    )


def _bge_m3_spec(model_dir: Path, name: str, architecture: str, hf_config: dict, st_cfg: dict, hidden_size: int,
                 max_seq_len: int | None) -> ModelSpec:
    """BGE-M3's description (engine/model_files/bge_m3.py): its rows are engine/contract/m3_rows.py's, as
    wide as the wider of the dense and token vectors and a weight."""
    modules = read_modules(model_dir, hidden_size, st_cfg)
    m3 = read_bge_m3(model_dir, hidden_size, modules, architecture in DECODER_ARCHITECTURES)
    model_limit = _max_seq_len(model_dir, hf_config, modules, architecture)
    return ModelSpec(
        path=model_dir, name=name, architecture=architecture, hf_config=hf_config, pooling="cls", normalize=True,
        max_seq_len=min(max_seq_len, model_limit) if max_seq_len else model_limit, hidden_size=hidden_size,
        embedding_dim=m3_rows.row_width(m3.dense_dim, m3.colbert_dim), is_causal=False,
        prompts=dict(st_cfg.get("prompts") or {}), matryoshka_dims=(), lowercase=modules.lowercase, m3=m3,
    )


def _refuse_dual_encoder_overrides(model_dir: Path, overrides: ModelOverrides, family: str) -> None:
    asked = {name: value for name, value in (("--model-kind", overrides.kind), ("--pooling", overrides.pooling),
                                             ("--attention", overrides.attention),
                                             ("--output-quantization", overrides.quantization))
             if value is not None and value not in ("embed", "none")}
    if asked:
        raise ModelLoadError(f"{model_dir}: a {family} model's pooling, attention, kind and output are its own; "
                             f"{', '.join(asked)} cannot change them")


def _matryoshka(overrides: ModelOverrides, width: int) -> tuple[int, ...] | None:
    try:
        return None if overrides.matryoshka_dims is None else parse_matryoshka_dims(overrides.matryoshka_dims, width)
    except FlavourError as exc:
        raise ModelLoadError(str(exc)) from exc


def _clip_spec(model_dir: Path, name: str, hf_config: dict, max_seq_len: int | None,
               overrides: ModelOverrides) -> ModelSpec:
    """A CLIP model's description (engine/model_files/clip.py): its text tower is causal and read at the
    text's last token once the text is cut after its end token; both towers' vectors are projection_dim wide."""
    _refuse_dual_encoder_overrides(model_dir, overrides, "CLIP")
    try:
        clip = read_clip(model_dir, hf_config)
    except ClipError as exc:
        raise ModelLoadError(f"{model_dir}: {exc}") from exc
    text = hf_config["text_config"]
    model_limit = int(text.get("max_position_embeddings", 77))
    tok_cfg = read_json_object(model_dir / "tokenizer_config.json") or {}
    if isinstance(tok_cfg.get("model_max_length"), int) and tok_cfg["model_max_length"] < 10**9:
        model_limit = min(model_limit, tok_cfg["model_max_length"])
    return ModelSpec(
        path=model_dir, name=name, architecture="clip", hf_config=hf_config, pooling="last", normalize=True,
        max_seq_len=min(max_seq_len, model_limit) if max_seq_len else model_limit,
        hidden_size=int(text.get("hidden_size", 512)), embedding_dim=clip.projection_dim, is_causal=True,
        matryoshka_dims=_matryoshka(overrides, clip.projection_dim), clip=clip,
    )


def _siglip_spec(model_dir: Path, name: str, hf_config: dict, max_seq_len: int | None,
                 overrides: ModelOverrides) -> ModelSpec:
    """A SigLIP model's description (engine/model_files/siglip.py): its text tower is bidirectional and read
    at the last token of a text as long as its position table (padded, or its positions shifted to end
    there); both towers' vectors are projection_dim wide."""
    if refusal := config_refusal("siglip", hf_config):
        raise ModelLoadError(refusal)
    _refuse_dual_encoder_overrides(model_dir, overrides, "SigLIP")
    try:
        clip, lowercase = read_siglip(model_dir, hf_config)
    except ClipError as exc:
        raise ModelLoadError(f"{model_dir}: {exc}") from exc
    text = text_tower(hf_config)
    text_len = int(text["max_position_embeddings"])
    if max_seq_len is not None and max_seq_len < text_len:
        raise ModelLoadError(f"{model_dir}: a SigLIP text is read at position {text_len - 1} of a {text_len}-token "
                             f"sequence, as the model was trained; --max-seq-len {max_seq_len} cannot shorten it")
    return ModelSpec(
        path=model_dir, name=name, architecture="siglip", hf_config=hf_config, pooling="last", normalize=True,
        max_seq_len=text_len, hidden_size=int(text["hidden_size"]), embedding_dim=clip.projection_dim,
        is_causal=False, matryoshka_dims=_matryoshka(overrides, clip.projection_dim), clip=clip, lowercase=lowercase,
    )


def _sparse_spec(root: Path, model_dir: Path, name: str, architecture: str, hf_config: dict, st_cfg: dict,
                 hidden_size: int, max_seq_len: int | None, overrides: ModelOverrides) -> ModelSpec:
    """A sparse encoder's description (engine/model_files/sparse.py says which checkpoints are); `root`
    holds its sentence-transformers files, `model_dir` its model (the same folder but for a Router)."""
    sparse, max_seq_length, lowercase = read_sparse(root, hf_config, st_cfg, overrides.max_active_dims)
    model_limit = _max_seq_len(model_dir, hf_config, SentenceModules(max_seq_length=max_seq_length), architecture)
    prompts = dict(st_cfg.get("prompts") or {})
    default_prompt = st_cfg.get("default_prompt_name")
    if overrides.default_prompt_name is not None:
        default_prompt = overrides.default_prompt_name or None
    if default_prompt is not None and default_prompt not in prompts:
        raise ModelLoadError(f"default prompt {default_prompt!r} is not among the model's prompts "
                             f"({', '.join(prompts) or 'none'})")
    return ModelSpec(
        path=model_dir, name=name, architecture=architecture, hf_config=hf_config, pooling=sparse.pooling,
        normalize=False, max_seq_len=min(max_seq_len, model_limit) if max_seq_len else model_limit,
        hidden_size=hidden_size, embedding_dim=row_width(sparse.num_slots), is_causal=False, prompts=prompts,
        default_prompt_name=default_prompt, matryoshka_dims=(), lowercase=lowercase, sparse=sparse,
    )


def load_state_dict(model_dir: Path) -> dict[str, torch.Tensor]:
    """All tensors of the weights in `model_dir`: safetensors (one file or shards), else the
    older `pytorch_model.bin` (one file or shards), read with torch.load(weights_only=True)."""
    for index_name, pattern in (("model.safetensors.index.json", "*.safetensors"),
                                ("pytorch_model.bin.index.json", "pytorch_model*.bin")):
        index = read_json(model_dir / index_name)
        if isinstance(index, dict) and "weight_map" in index:
            files = sorted({model_dir / f for f in index["weight_map"].values()})
        else:
            files = sorted(model_dir.glob(pattern))
        if files:
            break
    else:
        raise ModelLoadError(f"{model_dir} has no weights: neither *.safetensors nor pytorch_model.bin")
    from safetensors.torch import load_file

    state: dict[str, torch.Tensor] = {}
    for file in files:
        state.update(load_file(str(file)) if file.suffix == ".safetensors" else _load_pickled(file))
    return {_current_name(name): tensor for name, tensor in state.items()}


def _current_name(name: str) -> str:
    """Old checkpoints (bert-base-uncased's pytorch_model.bin) call LayerNorm's parameters gamma
    and beta; Hugging Face renames them on load, and so does this."""
    for old, new in (("LayerNorm.gamma", "LayerNorm.weight"), ("LayerNorm.beta", "LayerNorm.bias")):
        if name.endswith(old):
            return name[: -len(old)] + new
    return name


def _load_pickled(file: Path) -> dict[str, torch.Tensor]:
    """A torch.save'd state dict, unpickled with weights_only=True: tensors and plain containers
    only, so that a checkpoint cannot run code while it loads."""
    import torch

    try:
        # mmap needs torch's zip format (torch >= 1.6); older files are read whole.
        state = torch.load(file, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(file))
    except pickle.UnpicklingError as exc:
        raise ModelLoadError(
            f"{file} holds more than tensors, and rose-embed loads pytorch_model.bin only with "
            "torch.load(weights_only=True), which refuses to unpickle other objects (they could run code). "
            "Convert the checkpoint to safetensors (e.g. load it with transformers and save_pretrained it "
            f"again) if you trust it. ({str(exc).splitlines()[0]})"
        ) from exc
    except (RuntimeError, EOFError, OSError) as exc:
        raise ModelLoadError(f"{file} could not be read as a PyTorch checkpoint: {exc}") from exc
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ModelLoadError(f"{file} is not a state dict (a mapping of names to tensors)")
    return state
