"""What a request costs the queue, known before anything of it is tokenized (server/links/admission.py).

A text's cost is its characters over CHARS_PER_TOKEN, cut at the model's limit where its
inputs are truncated (a window per limit's worth where they are chunked); a token-id input's is
its ids, cut the same way. The estimate stands until the request is tokenized, when its real
token count replaces it. It is an estimate, not a bound: prose in languages that take more
tokens per character is counted short until then.
"""

from __future__ import annotations

from rose_embed.compat.inputs import NormalisedInput

# English prose takes about four characters a token in WordPiece and BPE vocabularies.
CHARS_PER_TOKEN = 4
# Special tokens a text gains ([CLS] and [SEP], or an end token), counted on top.
SPECIAL_TOKENS = 2


def input_cost(num_chars_or_ids: int, max_seq_len: int, is_chunked: bool, is_text: bool = True) -> int:
    tokens = (num_chars_or_ids // CHARS_PER_TOKEN if is_text else num_chars_or_ids) + SPECIAL_TOKENS
    if not is_chunked:
        return min(tokens, max_seq_len)
    windows = -(-tokens // max_seq_len)
    return tokens + (windows - 1) * SPECIAL_TOKENS


def request_cost(inputs: NormalisedInput, max_seq_len: int, is_chunked: bool = False, image_seq_len: int = 0) -> int:
    """The queue's estimate of a request's tokens, from its texts' characters or its token ids; an image
    counts `image_seq_len`, its exact size."""
    if inputs.items is not None:
        return sum(input_cost(len(item), max_seq_len, is_chunked) if isinstance(item, str) else image_seq_len
                   for item in inputs.items)
    if inputs.texts is not None:
        return sum(input_cost(len(text), max_seq_len, is_chunked) for text in inputs.texts)
    return sum(input_cost(len(ids), max_seq_len, is_chunked, is_text=False) for ids in inputs.token_ids)

