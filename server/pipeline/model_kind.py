"""Each route serves one kind of model, or a few: dense embeddings from an embedder, scores from a
reranker, (token id, weight) pairs from a sparse encoder. A request for another kind gets a 400 that
says what the served model is and which route fits."""

from __future__ import annotations

from rose_embed.server.http.errors import invalid_request
from rose_embed.server.pipeline.served_models import SPARSE, ServedModel


def require_kind(model: ServedModel, kind: str | tuple[str, ...]) -> None:
    """`kind`: what the route serves, "embedding", "rerank" or "sparse_embedding" (or several)."""
    kinds = (kind,) if isinstance(kind, str) else kind
    if model.kind in kinds:
        return
    if model.kind == SPARSE:
        raise invalid_request(
            f"The model '{model.name}' is a sparse encoder (SPLADE): it gives each text's (token id, weight) pairs, "
            "not dense embeddings or relevance scores. Send its texts to POST /embed_sparse or POST /v1/embeddings "
            "instead.", "model", "model_is_sparse")
    if "embedding" in kinds or (SPARSE in kinds and model.kind == "rerank"):
        raise invalid_request(
            f"The model '{model.name}' is a reranker: it scores (query, document) pairs and gives no embeddings. "
            "Send the query and documents to POST /v1/rerank instead.", "model", "model_is_reranker")
    if SPARSE in kinds:
        raise invalid_request(
            f"The model '{model.name}' is a dense embedder, not a sparse encoder: it gives dense vectors, not "
            "(token id, weight) pairs. Embed with POST /embed or /v1/embeddings, or serve a SPLADE model (a "
            "sentence-transformers SparseEncoder) for POST /embed_sparse.", "model", "model_is_embedder")
    raise invalid_request(
        f"The model '{model.name}' is an embedder, not a reranker: it gives embeddings, not relevance scores. "
        "Embed the query and documents with POST /v1/embeddings and compare the vectors, or serve a "
        "cross-encoder or Qwen3-Reranker for /v1/rerank.", "model", "model_is_embedder")
