"""The answers the HTTP protocol gives itself, before any app runs: a request that does not parse,
a request head too large or too slow, a connection past the cap. Each is a whole HTTP response
in OpenAI's envelope, as bytes for the transport, closing the connection."""

from __future__ import annotations

from uvicorn.protocols.http.httptools_impl import STATUS_LINE

from rose_embed.server.http.errors import APIError, envelope


def invalid_http_request() -> APIError:
    return APIError(400, "Invalid HTTP request received.", "invalid_request_error", None, "invalid_http_request")


def headers_too_large(max_header_bytes: int) -> APIError:
    return APIError(431, f"The request's headers are larger than the server's limit of {max_header_bytes} bytes "
                    "(--max-header-bytes).", "invalid_request_error", None, "request_headers_too_large")


def headers_too_slow() -> APIError:
    """408: the client was slow to send its request, not the server to answer."""
    return APIError(408, "The request's headers did not arrive within the server's --header-timeout; send the "
                    "request again.", "invalid_request_error", None, "request_timeout")


def too_many_connections() -> APIError:
    return APIError(503, "The server holds as many connections as it allows (--max-connections); retry shortly, "
                    "or reuse a connection.", "server_error", None, "too_many_connections",
                    headers={"Retry-After": "1"})


def raw_response(err: APIError, default_headers: list[tuple[bytes, bytes]]) -> bytes:
    """`err` as a complete HTTP/1.1 response that closes the connection. `default_headers`:
    uvicorn's (server, date), as on its other answers."""
    body = envelope(err)
    lines = [STATUS_LINE[err.status]]
    headers = [*default_headers, (b"content-type", b"application/json"),
               (b"content-length", str(len(body)).encode()), (b"connection", b"close"),
               *((name.lower().encode(), value.encode()) for name, value in err.headers.items())]
    lines += [name + b": " + value + b"\r\n" for name, value in headers]
    return b"".join([*lines, b"\r\n", body])
