"""rose-embed embed and the corpus job: sources, resuming, Ray."""
