"""Whether a checkpoint is BGE-M3 (dense, sparse and multi-vector from one forward pass), from its files.

BAAI/bge-m3's layout: an XLMRobertaModel checkpoint (config.json, weights, tokenizer), the
sentence-transformers files of its dense side (modules.json: Transformer, Pooling with CLS, Normalize),
and beside them two torch.save'd state dicts of `torch.nn.Linear`:

  colbert_linear.pt   weight [D, H], bias [D]: each token's vector before normalisation (D = H in BGE-M3)
  sparse_linear.pt    weight [1, H], bias [1]: each token's lexical weight before the relu

What FlagEmbedding computes from them (FlagEmbedding/finetune/embedder/encoder_only/m3/modeling.py,
EncoderOnlyEmbedderM3ModelForInference.forward, and inference/embedder/encoder_only/m3.py,
M3Embedder.encode_single_device), which the engine computes exactly:

  dense    the first token's (CLS) last hidden state, L2 normalised
  sparse   relu(sparse_linear(state)) per token; per token id the largest weight among its tokens,
           leaving out the ids of the cls, eos, pad and unk tokens and weights that are not positive
  colbert  colbert_linear(state) of every token after the first (the end token included), each L2 normalised

Refused by name: one of the two .pt files without the other (FlagEmbedding would initialise both at
random), linears of other shapes, sentence-transformers modules other than CLS pooling and Normalize
(the dense vector would not be FlagEmbedding's), decoder architectures.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rose_embed.engine.model_files.json_files import read_json_object
from rose_embed.engine.model_files.st_modules import Normalize, SentenceModules
from rose_embed.engine.model_files.torch_file_shapes import TorchFileError, state_dict_shapes

COLBERT_FILE = "colbert_linear.pt"
SPARSE_FILE = "sparse_linear.pt"
# The tokens whose ids a sparse vector never holds (M3Embedder's _process_token_weights).
_UNUSED_TOKENS = ("cls_token", "eos_token", "pad_token", "unk_token")


class BgeM3Error(ValueError):
    """A BGE-M3 checkpoint that the engine cannot compute exactly."""


@dataclass(frozen=True)
class BgeM3Model:
    """The two linears after the encoder and the token ids a sparse vector leaves out."""

    dense_dim: int  # H: the dense vector is the CLS token's state
    colbert_dim: int  # D: colbert_linear's out_features
    colbert_weights: Path
    sparse_weights: Path
    unused_ids: frozenset[int]  # the cls, eos, pad and unk tokens' ids


def is_bge_m3(model_dir: Path) -> bool:
    """Either of BGE-M3's linears beside the model."""
    return (model_dir / COLBERT_FILE).is_file() or (model_dir / SPARSE_FILE).is_file()


def _linear_shape(path: Path, hidden_size: int) -> int:
    """out_features of the nn.Linear state dict in `path`, checked to read `hidden_size` features."""
    try:
        shapes = state_dict_shapes(path)
    except TorchFileError as exc:
        raise BgeM3Error(str(exc)) from None
    weight, bias = shapes.get("weight"), shapes.get("bias")
    if set(shapes) != {"weight", "bias"} or len(weight) != 2 or weight[1] != hidden_size or bias != weight[:1]:
        raise BgeM3Error(f"{path.name} is not the state dict of a torch.nn.Linear from the model's {hidden_size} "
                         f"features with a bias; it holds {shapes}")
    return weight[0]


def _token_name(value) -> str | None:
    if isinstance(value, dict):  # an AddedToken written out
        value = value.get("content")
    return value if isinstance(value, str) else None


def _unused_ids(model_dir: Path) -> frozenset[int]:
    """The ids of the special tokens the tokenizer names among cls, eos, pad and unk (its special_tokens_map)."""
    from rose_embed.engine.model_files.tokenizer_file import read_tokenizer

    named = dict(read_json_object(model_dir / "tokenizer_config.json") or {})
    named.update(read_json_object(model_dir / "special_tokens_map.json") or {})
    tokenizer = read_tokenizer(model_dir / "tokenizer.json")
    ids = set()
    for key in _UNUSED_TOKENS:
        name = _token_name(named.get(key))
        token_id = tokenizer.token_to_id(name) if name is not None else None
        if token_id is not None:
            ids.add(token_id)
    return frozenset(ids)


def _check_dense_side(modules: SentenceModules) -> None:
    """The sentence-transformers modules must give FlagEmbedding's dense vector: CLS, then Normalize (or no
    modules at all)."""
    if modules.pooling is None and not modules.head:
        return  # no modules.json: FlagEmbedding's own defaults, CLS pooling and normalisation
    if modules.pooling != "cls" or modules.head != (Normalize(),) or modules.quantizer or modules.truncate_dim:
        raise BgeM3Error(f"a BGE-M3 model whose modules.json gives pooling {modules.pooling!r} and steps "
                         f"{[type(step).__name__ for step in modules.head]} is not supported: FlagEmbedding's dense "
                         "vector is the CLS token's state, normalised (Pooling with CLS, then Normalize)")


def read_bge_m3(model_dir: Path, hidden_size: int, modules: SentenceModules, is_decoder: bool) -> BgeM3Model:
    """How BGE-M3's three outputs are computed; BgeM3Error names what cannot be computed exactly."""
    missing = [name for name in (COLBERT_FILE, SPARSE_FILE) if not (model_dir / name).is_file()]
    if missing:
        raise BgeM3Error(f"a BGE-M3 model needs both {COLBERT_FILE} and {SPARSE_FILE}; {missing[0]} is missing "
                         "(FlagEmbedding would initialise both at random)")
    if is_decoder:
        raise BgeM3Error("a BGE-M3 model on a decoder is not supported: its dense vector is the first token's state, "
                         "which a causal model computes from that token alone")
    _check_dense_side(modules)
    if _linear_shape(model_dir / SPARSE_FILE, hidden_size) != 1:
        raise BgeM3Error(f"{SPARSE_FILE} must give one weight per token (out_features 1)")
    return BgeM3Model(dense_dim=hidden_size, colbert_dim=_linear_shape(model_dir / COLBERT_FILE, hidden_size),
                      colbert_weights=model_dir / COLBERT_FILE, sparse_weights=model_dir / SPARSE_FILE,
                      unused_ids=_unused_ids(model_dir))
