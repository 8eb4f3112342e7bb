"""What a model's directory says: config, tokenizer file, sentence-transformers modules, its kind
and flavour, read without torch. Runs in every process that knows the model: the CLI, the
supervisor, the front ends and the engine processes.
"""
