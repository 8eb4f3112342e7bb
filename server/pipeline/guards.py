"""Checks around the model: input sizes before tokenizing, finite vectors before JSON."""

from __future__ import annotations

import logging

import numpy as np

from rose_embed.server.http.errors import APIError, invalid_request, shutting_down

logger = logging.getLogger("rose_embed.guards")


def check_input_chars(texts: list[str], max_chars: int, is_chunked: bool = False,
                      token_ids: list[list[int]] | None = None, param: str = "input") -> None:
    """Reject an over-long text before the tokenizer reads all of it (it truncates only after).
    `token_ids`: the ids the client sent where `texts` are their decoding (--token-ids cl100k),
    so that the answer speaks of what the client sent; `param`: the field that held the texts."""
    if token_ids is None:
        hint = ("split the text, or start the server with a larger --max-input-chars" if is_chunked
                else "the model reads only its first tokens anyway: send shorter texts")
    else:
        hint = ("send fewer ids per input, or start the server with a larger --max-input-chars" if is_chunked
                else "the model reads only its first tokens anyway: send fewer ids per input")
    for i, text in enumerate(texts):
        if len(text) <= max_chars:
            continue
        if token_ids is None:
            holds = f"holds {len(text)} characters"
        else:
            holds = f"holds {len(token_ids[i])} token ids, which decode to {len(text)} characters of text"
        raise invalid_request(f"'{param}[{i}]' {holds}; at most {max_chars} characters are allowed per input ({hint})",
                              param, "input_too_long")


def check_finite(vectors: np.ndarray, request_id: str) -> None:
    """A NaN or infinity is no valid JSON number and no usable embedding: fail the request."""
    # One sum is cheaper than a mask: in float64, finite float32 values cannot overflow it, so
    # it is finite exactly when every element is.
    if not np.isfinite(vectors.sum(dtype=np.float64)):
        bad = np.flatnonzero(~np.isfinite(vectors).all(axis=1)).tolist()
        logger.error("request %s: the model produced non-finite vectors for inputs %s", request_id, bad[:16])
        raise APIError(500, "The model produced a non-finite embedding for this input; the request failed.",
                       "server_error", None, "non_finite_embedding")


def body_too_slow() -> APIError:
    """408, not 504: here the client was slow to send, not the server to answer. The connection
    closes: the rest of the body, should it come, would read as the next request."""
    return APIError(408, "The request body did not arrive within the server's --request-timeout; send it "
                    "again.", "invalid_request_error", None, "request_timeout", headers={"connection": "close"})


def client_closed() -> APIError:
    """nginx's 499: the client went away before the server could answer; no one reads this answer,
    the log and the metrics do."""
    return APIError(499, "The client closed the request.", "invalid_request_error", None, "client_closed")


def upload_cut_off_by_drain() -> APIError:
    """A body still arriving when the server starts to stop: answered at once, the connection closed."""
    err = shutting_down()
    err.headers["connection"] = "close"
    return err


def request_timeout() -> APIError:
    return APIError(504, "The request did not finish within the server's --request-timeout; retry it, "
                    "perhaps with fewer inputs.", "server_error", None, "request_timeout")
