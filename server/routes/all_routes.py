"""Every route the server serves, each declared once (server/http/route_spec.py): app.py registers
them, the middleware labels requests by them and the API-key guard admits by them. A route added
to the server is added here."""

from __future__ import annotations

from rose_embed.server.http.route_spec import RouteSpec
from rose_embed.server.metrics import prometheus
from rose_embed.server.routes import (classify, cohere_embed, contextualized, embeddings, infinity_image,
                                      models_health, rerank, tei_embed, tokenize)
from rose_embed.server.routes import tei_sparse

ROUTES: tuple[RouteSpec, ...] = (
    *models_health.ROUTES, *embeddings.ROUTES, *cohere_embed.ROUTES, *tei_embed.ROUTES, *contextualized.ROUTES,
    *rerank.ROUTES, *classify.ROUTES, *tokenize.ROUTES, *prometheus.ROUTES,
    *tei_sparse.ROUTES, *infinity_image.ROUTES,
)
