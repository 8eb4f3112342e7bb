"""Each route serves one kind of model: embeddings from an embedder, scores from a reranker.
A request for the other kind gets a 400 that says what the served model is and which route fits."""

from __future__ import annotations

from rose_embed.server.http.errors import invalid_request
from rose_embed.server.pipeline.served_models import ServedModel


def require_kind(model: ServedModel, kind: str) -> None:
    """`kind`: what the route serves, "embedding" or "rerank"."""
    if model.kind == kind:
        return
    if kind == "embedding":
        raise invalid_request(
            f"The model '{model.name}' is a reranker: it scores (query, document) pairs and gives no embeddings. "
            "Send the query and documents to POST /v1/rerank instead.", "model", "model_is_reranker")
    raise invalid_request(
        f"The model '{model.name}' is an embedder, not a reranker: it gives embeddings, not relevance scores. "
        "Embed the query and documents with POST /v1/embeddings and compare the vectors, or serve a "
        "cross-encoder or Qwen3-Reranker for /v1/rerank.", "model", "model_is_embedder")
