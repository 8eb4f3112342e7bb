"""The Router layout of an inference-free sparse encoder, read from its files.

opensearch's inference-free models (`opensearch-neural-sparse-encoding-doc-v*`) are saved by
sentence-transformers as one `Router` module whose router_config.json names two routes, each in
folders of its own:

  query      SparseStaticEmbedding           a fixed weight per token id: a query's vector holds the
                                             weight of each token it has (no model runs)
  document   MLMTransformer (or Transformer  the SPLADE encoder, served as any sparse encoder is
             with fill-mask), SpladePooling  (engine/model_files/sparse.py)

`SparseEncoder.encode_query` takes the query route, `encode_document` the document route, plain
`encode` the config's `default_route`. The document route's model (config.json, weights,
tokenizer) lies in its first module's folder, which the loader serves as the model's directory;
the query route's folder holds its tokenizer and weights (engine/text/static_queries.py).
Anything else in a Router (route mappings, other routes or modules) is refused by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rose_embed.engine.model_files.json_files import read_json, read_json_object
from rose_embed.engine.model_files.st_modules import ModuleEntry

ROUTES = ("query", "document")


class RouterError(ValueError):
    """A Router layout that the engine cannot compute exactly."""


@dataclass(frozen=True)
class StaticQueries:
    """The query route: a SparseStaticEmbedding's folder (tokenizer.json, tokenizer_config.json, model.safetensors)."""

    folder: Path


@dataclass(frozen=True)
class RoutedLayout:
    document: list[ModuleEntry]  # the document route's modules, each in its folder
    queries: StaticQueries
    default_route: str  # "query" | "document": the route of a request that names neither


def _is_router(model_dir: Path) -> bool:
    entries = read_json(model_dir / "modules.json")
    return (isinstance(entries, list) and len(entries) == 1 and isinstance(entries[0], dict)
            and str(entries[0].get("type", "")).endswith(".Router"))


def read_router(model_dir: Path) -> RoutedLayout | None:
    """The routes of a sparse encoder saved as one Router (None for any other layout); RouterError
    names what cannot be served."""
    if not _is_router(model_dir):
        return None
    cfg = read_json_object(model_dir / "router_config.json") or {}
    types, structure = cfg.get("types") or {}, cfg.get("structure") or {}
    parameters = cfg.get("parameters") or {}
    if sorted(structure) != sorted(ROUTES):
        raise RouterError(f"a Router with the routes {sorted(structure)} is not supported; only an inference-free "
                          "sparse encoder's query and document routes are")
    if parameters.get("route_mappings"):
        raise RouterError("a Router with route_mappings is not supported (routes are taken by name: query, document)")
    default_route = parameters.get("default_route") or ROUTES[0]
    if default_route not in ROUTES:
        raise RouterError(f"the Router's default_route {default_route!r} is none of {', '.join(ROUTES)}")
    entries = {route: [ModuleEntry(model_dir, {"path": folder, "type": types.get(folder, ""), "name": folder}, i)
                       for i, folder in enumerate(structure[route])] for route in ROUTES}
    query = [entry.cls for entry in entries["query"]]
    if query != ["SparseStaticEmbedding"]:
        raise RouterError(f"a Router whose query route is {query} is not supported; only SparseStaticEmbedding "
                          "(an inference-free query encoder) is")
    return RoutedLayout(entries["document"], StaticQueries(entries["query"][0].folder), default_route)


def routed_model_dir(model_dir: Path) -> Path | None:
    """Where a sparse encoder's Router keeps its document model (its first module's folder), or None
    for any other layout (a dense model's Router is refused as modules.json's other modules are)."""
    st_cfg = read_json_object(model_dir / "config_sentence_transformers.json") or {}
    if st_cfg.get("model_type") != "SparseEncoder":
        return None
    layout = read_router(model_dir)
    return layout.document[0].folder if layout is not None and layout.document else None
