"""The models a server serves, as the routes see them: each one's place, served name and view.

A request's `model` picks one (server/pipeline/aliases.py resolves the name); its place in the list is
what a piece carries to the engines (engine/contract/messages.py's Piece.model), whose processes hold
every model in the same order (server/config.py's model_configs).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rose_embed.compat.encoding import encoding_formats
from rose_embed.compat.multi_vector_wire import MULTI_VECTOR_FORMATS
from rose_embed.engine.model_files.model_view import ModelView
from rose_embed.server.config import ServerConfig

SPARSE = "sparse_embedding"  # a sparse encoder's kind (server/pipeline/sparse_ask.py)
MULTI_VECTOR = "multi_vector_embedding"  # a ColBERT model's kind (server/pipeline/colbert_ask.py)
MULTI_OUTPUT = "multi_output_embedding"  # BGE-M3's kind: dense, sparse and multi-vector (server/pipeline/m3_ask.py)


@dataclass(frozen=True)
class ServedModel:
    """Besides its view, the figures every request asks of it, read from the view once."""

    index: int  # its place among the server's models: the first is the default one
    name: str  # what clients send as `model` and /v1/models lists
    view: ModelView  # its description and tokenizer
    # what /v1/models says it does: "embedding", "rerank", "classify", "sparse_embedding" (SPARSE) or
    # "multi_vector_embedding" (MULTI_VECTOR) or "multi_output_embedding" (MULTI_OUTPUT)
    kind: str = field(init=False)
    formats: tuple[str, ...] = field(init=False)  # the encoding formats it can write
    normalizes: bool = field(init=False)  # its vectors are L2-normalised as they are computed
    tokenizes_holding_the_gil: bool = field(init=False)  # its tokenizer is Python's, not Rust's
    # The tokens each image counts (its vision tower's patches and class token); 0: it embeds texts only.
    image_seq_len: int = field(init=False)

    def __post_init__(self) -> None:
        spec = self.view.spec
        kind = "embedding" if spec.kind == "embed" else spec.kind
        kind = SPARSE if spec.sparse is not None else MULTI_VECTOR if spec.colbert is not None else kind
        kind = MULTI_OUTPUT if spec.m3 is not None else kind
        object.__setattr__(self, "kind", kind)
        # A sparse model's pairs are written as JSON numbers only (server/pipeline/sparse_ask.py).
        formats = ("float",) if spec.sparse is not None else tuple(encoding_formats(spec.quantization))
        # ColBERT's and BGE-M3's several vectors per text: float arrays or one base64 string each
        if spec.colbert is not None or spec.m3 is not None:
            formats = MULTI_VECTOR_FORMATS
        object.__setattr__(self, "formats", formats)
        object.__setattr__(self, "normalizes", spec.normalize)
        object.__setattr__(self, "tokenizes_holding_the_gil", self.view.tokenizer.holds_the_gil)
        object.__setattr__(self, "image_seq_len", spec.clip.image_seq_len if spec.clip is not None else 0)

    @property
    def takes_images(self) -> bool:
        return self.image_seq_len > 0


def served_models(config: ServerConfig, views: list[ModelView]) -> list[ServedModel]:
    """`views` in the order of model_configs(config); each named as its flag says, else by its files."""
    names = [config.served_model_name, *(extra.served_name for extra in config.extra_models)]
    names += [None] * (len(views) - len(names))
    return [ServedModel(i, name or view.spec.name, view) for i, (name, view) in enumerate(zip(names, views))]
