"""The models a server serves, as the routes see them: each one's place, served name and view.

A request's `model` picks one (server/pipeline/aliases.py resolves the name); its place in the list is
what a piece carries to the engines (engine/contract/messages.py's Piece.model), whose processes hold
every model in the same order (server/config.py's model_configs).
"""

from __future__ import annotations

from dataclasses import dataclass

from rose_embed.engine.model_files.model_view import ModelView
from rose_embed.server.config import ServerConfig


@dataclass(frozen=True)
class ServedModel:
    index: int  # its place among the server's models: the first is the default one
    name: str  # what clients send as `model` and /v1/models lists
    view: ModelView  # its description and tokenizer

    @property
    def kind(self) -> str:
        """What /v1/models says it does: "embedding" or "rerank"."""
        return "rerank" if self.view.spec.is_reranker else "embedding"


def served_models(config: ServerConfig, views: list[ModelView]) -> list[ServedModel]:
    """`views` in the order of model_configs(config); each named as its flag says, else by its files."""
    names = [config.served_model_name, *(extra.served_name for extra in config.extra_models)]
    names += [None] * (len(views) - len(names))
    return [ServedModel(i, name or view.spec.name, view) for i, (name, view) in enumerate(zip(names, views))]
