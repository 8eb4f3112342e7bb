"""Each route serves one kind of model: embeddings from an embedder, scores from a reranker.
A request for the other kind gets a 400 that says what the served model is and which route fits."""

from __future__ import annotations

from rose_embed.engine.model_files.loader import ModelSpec
from rose_embed.server.http.errors import invalid_request


def require_embedder(spec: ModelSpec, served: str) -> None:
    if spec.is_reranker:
        raise invalid_request(
            f"The model '{served}' is a reranker: it scores (query, document) pairs and gives no embeddings. "
            "Send the query and documents to POST /v1/rerank instead.", "model", "model_is_reranker")


def require_reranker(spec: ModelSpec, served: str) -> None:
    if not spec.is_reranker:
        raise invalid_request(
            f"The model '{served}' is an embedder, not a reranker: it gives embeddings, not relevance scores. "
            "Embed the query and documents with POST /v1/embeddings and compare the vectors, or serve a "
            "cross-encoder or Qwen3-Reranker for /v1/rerank.", "model", "model_is_embedder")
