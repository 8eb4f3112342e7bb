"""Each route serves one kind of model, or a few: embeddings from an embedder, scores from a
reranker, labels from a classifier, (token id, weight) pairs from a sparse encoder. A request for
another kind gets a 400 that says what the served model is and which route fits."""

from __future__ import annotations

from rose_embed.server.http.errors import invalid_request
from rose_embed.server.pipeline.served_models import MULTI_OUTPUT, MULTI_VECTOR, SPARSE, ServedModel

# A served model's kind -> what it is and gives, the route to send its inputs to, and the error's code.
_WHAT_IT_IS = {
    "embedding": ("an embedder: it gives embeddings", "Embed the texts with POST /v1/embeddings", "model_is_embedder"),
    "rerank": ("a reranker: it scores (query, document) pairs", "Send the query and documents to POST /v1/rerank",
               "model_is_reranker"),
    "classify": ("a classifier: it gives each text's label probabilities",
                 "Send the texts to POST /classify (or TEI's POST /predict)", "model_is_classifier"),
    SPARSE: ("a sparse encoder (SPLADE): it gives each text's (token id, weight) pairs",
             "Send the texts to POST /embed_sparse (or /v1/embeddings)", "model_is_sparse"),
    MULTI_VECTOR: ("a multi-vector (ColBERT) model: it gives one vector per token of a query or a document",
                   "Send the texts to POST /v1/embeddings (input_type query or document), or a query and its "
                   "documents to POST /v1/rerank", "model_is_multi_vector"),
    MULTI_OUTPUT: ("a BGE-M3 model: it gives a dense vector, (token id, weight) pairs and token vectors per text",
                   "Send the texts to POST /v1/embeddings (with `outputs` for more than the dense vector)",
                   "model_is_multi_output"),
}
# A route's kind -> what it answers with, and the models that serve it.
_WHAT_THE_ROUTE_GIVES = {
    "embedding": ("embeddings", "an embedding model"),
    "rerank": ("relevance scores", "a cross-encoder, Qwen3-Reranker or PyLate ColBERT model"),
    "classify": ("labels", "a *ForSequenceClassification classifier"),
    SPARSE: ("sparse embeddings", "a SPLADE model (a sentence-transformers SparseEncoder)"),
    MULTI_VECTOR: ("multi-vector embeddings", "a PyLate ColBERT model"),
    MULTI_OUTPUT: ("dense, sparse and multi-vector embeddings", "a BGE-M3 model"),
}


def require_kind(model: ServedModel, kind: str | tuple[str, ...]) -> None:
    """`kind`: what the route serves, "embedding", "rerank", "classify" or "sparse_embedding" (or several,
    the first the one its errors name)."""
    kinds = (kind,) if isinstance(kind, str) else kind
    if model.kind in kinds:
        return
    is_what, route, code = _WHAT_IT_IS[model.kind]
    gives, serve = _WHAT_THE_ROUTE_GIVES[kinds[0]]
    raise invalid_request(f"The model '{model.name}' is {is_what}, not {gives}. {route} instead, or serve {serve} "
                          "for this route.", "model", code)
