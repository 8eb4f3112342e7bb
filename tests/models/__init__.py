"""Real models and checkpoints against their references (sentence-transformers, transformers), in
process, no server (slow tier)."""
