"""POST /tokenize and /detokenize: the served model's tokenizer over HTTP, in vLLM's shape (compat/tokenize.py).

A text is tokenized whole, never truncated, so that a client can see how far past
`max_model_len` it would go; ids are decoded with their special tokens, so that
detokenize(tokenize(text)) gives back what the model reads. Both run where the pipeline
tokenizes (Serving.tokenize_whole and Serving.detokenize): its tokenizer threads.
"""

from __future__ import annotations

from litestar import Request
from litestar.datastructures import State

from rose_embed.compat.tokenize import DetokenizeRequest, DetokenizeResponse, TokenizeRequest, TokenizeResponse
from rose_embed.server.http.errors import invalid_request
from rose_embed.server.http.json_body import read_json
from rose_embed.server.http.openapi import ERROR_RESPONSES
from rose_embed.server.http.route_spec import RouteSpec
from rose_embed.server.pipeline.request_context import pick_model, serving_of


async def tokenize(request: Request, state: State) -> TokenizeResponse:
    serving = serving_of(state)
    data = await read_json(request, TokenizeRequest)
    model = pick_model(request, serving, data.model)
    max_chars = serving.config.max_input_chars
    if len(data.prompt) > max_chars:
        raise invalid_request(f"'prompt' holds {len(data.prompt)} characters; at most {max_chars} are allowed",
                              "prompt", "input_too_long")
    tokenizer = model.view.tokenizer
    ids = await serving.tokenize_whole(model, data.prompt, data.add_special_tokens)
    return TokenizeResponse(count=len(ids), max_model_len=model.view.spec.max_seq_len, tokens=list(ids),
                            token_strs=tokenizer.token_strings(ids) if data.return_token_strs else None)


async def detokenize(request: Request, state: State) -> DetokenizeResponse:
    serving = serving_of(state)
    data = await read_json(request, DetokenizeRequest)
    model = pick_model(request, serving, data.model)
    vocab_size = model.view.tokenizer.vocab_size
    tokens = data.tokens
    # min and max run in C; a Python loop over a body of millions of ids would hold the event loop.
    if tokens and not (min(tokens) >= 0 and max(tokens) < vocab_size):
        bad = next(i for i, token in enumerate(tokens) if not 0 <= token < vocab_size)
        raise invalid_request(f"'tokens[{bad}]' is {tokens[bad]}, which is no token of this model's vocabulary "
                              f"(ids 0..{vocab_size - 1})", "tokens")
    return DetokenizeResponse(prompt=await serving.detokenize(model, tokens))


ROUTES = [
    RouteSpec(tokenize, "POST", ("/tokenize",), "Tokenize a text with the served model's tokenizer", ERROR_RESPONSES,
              body=TokenizeRequest),
    RouteSpec(detokenize, "POST", ("/detokenize",), "Turn token ids back into text", ERROR_RESPONSES,
              body=DetokenizeRequest),
]
