"""Text to token ids and windows: the tokenizer, pair templates, long inputs and late chunking,
without torch. Runs in the front ends (and the part processes) and in the library's pipeline.
"""
