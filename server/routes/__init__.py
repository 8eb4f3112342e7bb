"""The routes, one file per API (OpenAI, Cohere, TEI, contextualized, rerank, tokenize, models and
health), each on the request pipeline (server/pipeline/). Runs in the front ends.
"""
